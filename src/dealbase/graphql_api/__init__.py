"""The GraphQL API for internal dashboards (Strawberry), a thin adapter over ``dealbase.platform``."""
