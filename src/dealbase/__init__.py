"""dealbase: customers and sales pipelines for many tenants, one PostgreSQL schema each."""
