"""Callers and their keys: API keys issued and checked, a request's caller authenticated from
the process's cache of keys, and each key's last use."""
