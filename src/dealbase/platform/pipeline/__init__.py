"""Departments, their pipeline steps, and their employees."""
