"""What a plan says makes a resubmit resume, for a script other than the shared one (which checkpoints by itself)."""

from __future__ import annotations

from cloudddp.spec.model import JobSpec, is_shared_script
from cloudddp.spec.placeholders import names_in


def resume_notes(spec: JobSpec) -> list[str]:
    """For a script other than the shared one (which checkpoints by itself), what makes a resubmit resume: its own
    saves, only where they outlive the run."""
    files = spec.checkpoint.files
    if files:
        return [
            f"checkpoint.files ({', '.join(files)}): before the program starts, on every node, each resolves into "
            "the checkpoint folder ($CLOUDDDP_CHECKPOINT_DIR/files, a link; a pattern's files are linked when "
            "kept and saved when new), so your script's own save and load resume on a resubmit"
        ]
    if not spec.checkpoint.enabled or is_shared_script(spec):
        return []
    given = [w for w in (*(spec.code.command or ()), *spec.code.args) if "checkpoint_dir" in names_in(w)]
    if given:
        return [
            f"your script is given the checkpoint folder ({given[0]}): what it saves there, a resubmit finds; "
            "what it writes in its working folder is discarded with the run"
        ]
    return [
        "your script: a resubmit resumes only if your script writes to $CLOUDDDP_CHECKPOINT_DIR (or "
        "{{checkpoint_dir}} in code.args) or declares checkpoint.files; what it writes in its working folder is "
        "discarded with the run"
    ]
