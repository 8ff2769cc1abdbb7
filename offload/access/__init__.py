"""Who may reach offload's HTTP servers (the dashboard, ``offload mcp --http``): the
home's access tokens and the Host and Origin checks against DNS rebinding.
"""
