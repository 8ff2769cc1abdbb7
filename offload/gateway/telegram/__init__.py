"""Telegram Bot API platform: HTTP client, text escaping/splitting, adapter, loopback fake."""
