"""What a worker's exit code usually means, for the job page and `gpuqueue status`
(standard library only). 128 + N is death by signal N, as a shell reports it."""

from __future__ import annotations

SIGNALLED = {
    137: "killed (SIGKILL): most often the container ran out of memory; ask for more memory "
    "or use less (it can also be a kill after a stop's grace period)",
    143: "terminated (SIGTERM): stopped from outside, as on a cancel, a preemption, a maximum "
    "runtime or a node drain",
    139: "a segmentation fault (SIGSEGV): the program read memory it does not own",
    134: "aborted (SIGABRT): the program stopped itself, often on a failed assertion",
}


def exit_hint(code: int | None) -> str:
    """'killed (SIGKILL): …' for the codes that say more than "failed"; '' for the others."""
    if code is None:
        return ""
    return SIGNALLED.get(code, "")


def without_prefix(reason: str, word: str) -> str:
    """'failed: exit code 137' shown after the word 'failed' reads 'exit code 137'."""
    text = reason.strip()
    prefix = f"{word}:"
    while text.lower().startswith(prefix.lower()):
        text = text[len(prefix) :].strip()
    return text
