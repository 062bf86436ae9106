"""Test rigs: emulators of the clouds, fault injection, helpers that run real training."""
