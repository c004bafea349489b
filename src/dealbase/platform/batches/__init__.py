"""Writes by external id: one record's upsert, and batches of creates and upserts."""
