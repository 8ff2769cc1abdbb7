"""Pure rendering: completion events in, the text a parent agent (or a UI) reads out.

``notification.format_event`` renders every event type of the completion bus; ``blocks``
builds the per-task blocks, ``text`` the escaping that keeps child output from forging
renderer lines. No I/O, no clock, no config reads here: what a render needs travels in the
event or is passed in (``offload.runtime.Offload.render`` passes its config; the compat
adapter ``tools/process_registry_notifications.py`` reads the home's config and keeps the
hermes name).
"""
