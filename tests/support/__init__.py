"""Test rigs shared by several test modules."""
