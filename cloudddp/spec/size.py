"""How large a job spec file may be. Its own module so that the snapshot's secrets filter, which reads spec files
inside ``code.dir``, knows the limit without importing the loader (and pydantic with it): a bare pack's start-up."""

MAX_BYTES = 1 << 20
