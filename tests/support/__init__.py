"""Test rigs shared by several test files (daemons started once per session, stopped by pid)."""
