"""The hermes ``tools`` package paths the acceptance suite imports, over offload."""
