"""The run's speculative head: where an attempt's patch is verified once its agent ended.

A winner verified on its own base lands on a tip that moved since: that merged tree is another
tree, and the merge queue verifies it again (docs/architecture.md, "The merge queue"). Zuul
avoids the second run by testing each change on top of everything ahead of it. Here, once an
agent ended, its patch is merged (``git merge-tree``, no checkout) onto the head: the tip, and
on it every patch stacked before it that may still land (winners in the queue, attempts still
verifying), in the order they were stacked. The patch verified there becomes the new head.

If the winners then land in that order, each lands on exactly the tree its attempt verified,
and the queue lands it without verifying it again (it compares trees: ``MergeTrain``). When
the order breaks (a patch ahead fails, loses, is bisected, or lands elsewhere), the trees
stacked on it will not land as verified: the queue verifies them as before. The head only
ever saves verifications; it never decides what lands.

Thread-safe: executors ask from their threads, the loop tells it what landed.
"""

from __future__ import annotations

import threading
from collections.abc import Container
from dataclasses import dataclass

from ..errors import GitError
from ..executors import AttemptJob, Stacked
from ..seams import Integrator

__all__ = ["Heads", "stackable"]


def stackable(job: AttemptJob) -> bool:
    """Whether the job's verification may run on the head: plain verify commands on a
    patch of the base (a reproduction check, discovered tests or a pipeline stage are judged
    against their own base, as before)."""
    return bool(job.verify) and not (job.check or job.auto_verify or job.stage or job.start_commit)


@dataclass(frozen=True)
class _Layer:
    """A patch on the head: ``commit`` is its tree with everything under it."""

    job_id: str
    commit: str


class Heads:
    """The tip orchardist last put the run branch at, and the patches stacked on it."""

    def __init__(self, integrator: Integrator, stacks: Container[str], tip: str = "") -> None:
        self.integrator = integrator
        self.stacks = stacks  # the tasks whose attempts stack: one candidate, no review
        self._lock = threading.Lock()
        self._tip = tip
        self._layers: list[_Layer] = []
        self._states: set[str] = {tip}  # commits whose tree the branch held (tips, landed layers)
        self._verified: dict[str, str] = {}  # a tip -> the layer of its tree, whose verify's
        # outcomes are kept as its baselines (a failure stacked on the tip is judged by them)

    @property
    def head(self) -> str:
        """The commit the next patch is stacked on."""
        with self._lock:
            return self._layers[-1].commit if self._layers else self._tip

    def stack(self, job: AttemptJob, patch: str) -> Stacked | None:
        """``patch`` merged onto the head, which it becomes; None when it is verified on its
        own base: the head is that base (its own tree is the merged one), the patch conflicts
        with what is ahead, or the job is judged otherwise."""
        if not self.may_stack(job) or not self._tip:
            return None
        with self._lock:  # one at a time: each stacks on the one before
            head = self._layers[-1].commit if self._layers else self._tip
            try:
                prepared = self.integrator.prepare(job.base_commit, patch, job.message, head)
            except GitError:  # (a damaged object store): its own base still tells
                return None
            if prepared.commit is None:
                return None
            self._layers.append(_Layer(job.id, prepared.commit))
            if head == job.base_commit:
                return None  # its own tree is the merged one
            return Stacked(prepared.commit, self._verified.get(head, head))

    def failed(self, job: AttemptJob, patch: str) -> Stacked | None:
        """The job's verification on the head failed. If a patch under it left the head since
        (it failed too, or the branch moved elsewhere), the patch is stacked again on the head
        as it is now, to verify there; else it leaves the head (None: its own base judges it)."""
        with self._lock:
            for i, layer in enumerate(self._layers):
                if layer.job_id == job.id:
                    del self._layers[i:]
                    return None
        return self.stack(job, patch)

    def held(self, commit: str) -> bool:
        """Whether the run branch held ``commit``'s tree at some point (orchardist put it at
        that commit, or at one of the same tree stacked here)."""
        with self._lock:
            return commit in self._states

    def may_stack(self, job: AttemptJob) -> bool:
        """Whether the job's patch is verified on the head (else on its own base)."""
        return job.task_id in self.stacks and stackable(job)

    def waits(self, job_id: str) -> bool:
        """Whether the job's patch is stacked on patches that have not landed yet (it lands
        as verified only after them)."""
        with self._lock:
            return any(layer.job_id == job_id for layer in self._layers[1:])

    def dropped(self, job_id: str) -> None:
        """The job's patch will not land: it and the layers stacked on it leave the head
        (those still verifying are verified again by the queue if they win)."""
        with self._lock:
            for i, layer in enumerate(self._layers):
                if layer.job_id == job_id:
                    del self._layers[i:]
                    return

    def landed(self, job_id: str, commit: str) -> None:
        """The run branch moved to ``commit`` (the job's patch landed). Landed as stacked,
        the layers above it stay; landed elsewhere, none of them can land as verified."""
        with self._lock:
            first = self._layers[0] if self._layers else None
        exact = (
            first is not None
            and first.job_id == job_id
            and self.integrator.same_tree(first.commit, commit)
        )
        with self._lock:
            if exact and first is not None and self._layers and self._layers[0] == first:
                self._layers.pop(0)
                self._states.add(first.commit)
                self._verified = {commit: first.commit}
            else:
                self._layers.clear()
            self._tip = commit
            self._states.add(commit)

    def follow(self, tip: str) -> None:
        """The run branch is at ``tip`` for another reason (a resume, a rewind, someone moved
        it): nothing stacked can land as verified."""
        with self._lock:
            self._layers.clear()
            self._tip = tip
            self._states.add(tip)
