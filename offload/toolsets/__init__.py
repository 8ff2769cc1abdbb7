"""Tools layer: delegate_task, the background-delegation engine, the completion bus,
the notification renderer and the child toolsets. Never imports agent/, gateway/ or offload/."""
