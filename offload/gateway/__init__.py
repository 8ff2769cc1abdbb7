"""Chat-gateway side: session context variables and the runner that routes background
results back to the chat they came from."""
