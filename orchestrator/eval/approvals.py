"""A scenario's scripted decisions for the calls that wait for approval.

An eval run has no person at hand, so when its execution ends `awaiting_approval` the scenario's
`approvals:` decide (suite.py `Approvals`): the first rule matching the call's tool and arguments
approves or rejects it (with the rule's reason), else `otherwise`. The decision that leaves no call
open resumes the thread, and this goes on until the run ends any other way. `leave`, or a call waiting
for something a rule cannot give (an answer, a result), ends the run still waiting, which the
`end_reason` and `approval_requested` checks can then grade.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.core.waiting import WaitingCall
from orchestrator.engine.executor import ExecutionResult
from orchestrator.eval.suite import ApprovalRule, Approvals, Suite, load_predicate
from orchestrator.runtime import Thread
from orchestrator.testing.checks import is_subset

__all__ = ["MAX_ROUNDS", "decide_waiting", "rule_for"]

MAX_ROUNDS = 100
"""Resumes one run may take: a model that asks for approval forever ends the run instead of the suite."""


def rule_for(
    approvals: Approvals, call: WaitingCall, matches: Callable[[ApprovalRule, WaitingCall], bool]
) -> ApprovalRule | None:
    """The first rule for the call's tool whose arguments and predicate match it, or None."""
    for rule in approvals.rules:
        if rule.tool == call.tool and matches(rule, call):
            return rule
    return None


async def decide_waiting(
    suite: Suite, approvals: Approvals | None, thread: Thread, result: ExecutionResult
) -> ExecutionResult:
    """Decide the run's waiting approvals by the scenario's rules until it ends not waiting for one;
    the last execution's result."""
    if approvals is None:
        return result
    predicates: dict[str, Callable[[dict[str, Any]], object]] = {}

    def matches(rule: ApprovalRule, call: WaitingCall) -> bool:
        if rule.arguments is not None and not is_subset(rule.arguments, call.arguments):
            return False
        if rule.predicate is None:
            return True
        if rule.predicate not in predicates:
            predicates[rule.predicate] = load_predicate(suite, rule.predicate)
        return bool(predicates[rule.predicate](call.arguments))

    for _ in range(MAX_ROUNDS):
        if not result.reason.startswith("awaiting_"):
            return result
        resumed = None
        for call in await thread.waiting_calls():
            if call.kind != "approval":
                return result
            rule = rule_for(approvals, call, matches)
            decision = rule.decision if rule is not None else approvals.otherwise
            if decision == "leave":
                return result
            if decision == "approve":
                resumed = await thread.approve(call.call_id) or resumed
            else:
                reason = (rule.reason if rule is not None else None) or approvals.reason
                resumed = await thread.reject(call.call_id, reason) or resumed
        if resumed is None:
            return result
        result = await resumed
    return result
