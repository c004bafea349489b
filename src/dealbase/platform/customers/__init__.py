"""Customers: people or organisations with contact data, owned by a department."""
