"""The actor runtime: mailboxes, supervision, timers, tracing. Knows nothing of Kubernetes.

An actor is a subclass of `Actor`; an `ActorSystem` maps address kinds to
factories and spawns an actor on the first message to its address.
docs/mailbox.md is the reader's guide.
"""

from .actor import Actor
from .chaos import ChaosMonkey
from .dead_letters import DeadLetter, DeadLetters
from .errors import ActorKilled, AskTimeout, Expected, MailboxError, MailboxFull, Undeliverable
from .supervision import Supervision
from .system import ActorSystem
from .tracing import Cause

__all__ = [
    "Actor",
    "ActorKilled",
    "ActorSystem",
    "AskTimeout",
    "Cause",
    "ChaosMonkey",
    "DeadLetter",
    "DeadLetters",
    "Expected",
    "MailboxError",
    "MailboxFull",
    "Supervision",
    "Undeliverable",
]
