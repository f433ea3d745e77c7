"""Literal tables of expected values shared by several test modules."""
