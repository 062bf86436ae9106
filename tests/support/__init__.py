"""Test rigs: emulators of the clouds, fault injection, container rehearsals, helpers that run real training."""
