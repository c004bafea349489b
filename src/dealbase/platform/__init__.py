"""The service layer both APIs share: one folder per feature (service, repository, models)."""
