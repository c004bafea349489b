"""Deals: sales opportunities moving through their department's pipeline steps."""
