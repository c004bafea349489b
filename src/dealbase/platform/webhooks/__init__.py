"""Webhook endpoints: where a department's events are delivered, signed with the endpoint's
secret."""
