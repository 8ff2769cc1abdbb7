"""The hermes ``gateway`` package paths the acceptance suite imports, over offload."""
