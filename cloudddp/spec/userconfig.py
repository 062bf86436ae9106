def configured_backends() -> list[str]:
    return []
