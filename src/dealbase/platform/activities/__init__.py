"""Activities: calls, emails, meetings, tasks and notes about a customer (and maybe a deal)."""
