"""Debate prompts: what an agent sees in a debate round, per template style.

Every builder returns the chat (a list of messages) and its content-free twin (every content
slot — question, own and peer responses — set to "N/A") for bias-corrected sequence
probability (Elahi & Di Eugenio, arXiv:2606.13591 §3.2).

Styles (config `template`):

* ``du``: Du et al.'s reference code (Tang et al., arXiv:2602.07186 §5.4, App. C.3.1, Jiang et al., arXiv:2605.23099 §5, App. A): the peers' responses are
  appended as a new user turn to the agent's own conversation, which keeps growing.
* ``choi``: Choi et al.'s `get_new_message` (Liu et al., arXiv:2601.22297 §6.1, App. B-C): a fresh single user turn with the
  peers' and the agent's own most recent responses.
* ``umad``: UMAD's debate prompt as the authors' code builds it (`qiaodan-cuhk/UMAD`,
  `marl/runners/multi_turn_traj_grpo.py`: `rollout_traj_grpo` labels each reply, then
  `merge_prompt_response`, called without `ego_id`, joins them): one fresh user turn, the same
  text for both agents, rebuilt from the question and the previous round's replies in agent order,
  each "agent k response is: ..." with its last \\boxed{} masked (`mask_boxed`: every reply, the
  agent's own too), and the authors' closing instruction. Two agents only (their text says "two
  answers", "both of them").
* ``pairwise``: the confidence paper's debate turn (Elahi & Di Eugenio, arXiv:2606.13591 App. E): a fresh user turn with the
  agent's own and the peer's earlier answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..grading import last_boxed_span
from .questions import NULL_SLOT, final_answer_text, question_body, question_messages

TEMPLATES = ("du", "choi", "umad", "pairwise")

NO_ANSWER = "(no answer)"
MASKED = "<answer>"

INSTRUCTIONS = {
    "du": "Using the solutions from other agents as additional information, can you provide your updated answer? "
    "Examine your solution and that of the other agents step by step. The original question is:",
    "choi": "Use these opinions carefully as additional advice to revise your recent opinion to give your final "
    "answer to the question:",
    "umad": "Please carefully review these answers and recognize which one is right. If one or all of them are right, "
    "please summarize the reasoning process of right ones and give the final answer. If both of them are wrong, "
    "please correct their mistakes and provide a novel and complete solution to the problem and give the final answer.",
    "pairwise": "Evaluate the other agent's reasoning carefully and decide whether to keep your original answer, "
    "adopt theirs, or propose a new one.",
}


@dataclass(frozen=True)
class PeerView:
    """One peer as a receiver sees it."""

    index: int
    response: str
    answer: str | None
    full: bool  # False: the answer only


def mask_last_boxed(text: str) -> str:
    """Replace the last \\boxed{...} (or \\fbox{...}) by <answer> (UMAD's released code); the box is
    the one `grading.last_boxed` reads. Boxes right before it that the grader reads with it as one
    answer ("\\boxed{1}, \\boxed{2}", `grading.answers`) stay visible."""
    span = last_boxed_span(text)
    if span is None:
        return text
    start, content_start, end = span
    braced = text[content_start - 1] == "{"  # else a bare "\\boxed 5"
    return text[:start] + MASKED + text[end + 1 if braced else end :]


#: The sentence the UMAD authors' debate prompt ends with (`merge_prompt_response`'s
#: `instruction_following`), the same their dataset appends to every question.
UMAD_INSTRUCTION_FOLLOWING = "Let's think step by step and output the final answer within \\boxed{}."
#: `merge_prompt_response`'s default template (`template=None`), verbatim.
UMAD_TEMPLATE = (
    "Given the following problem: {original_prompt} \n We have two answers: \n {responses} \n "
    + INSTRUCTIONS["umad"]
    + " {instruction_following}"
)


def umad_mask_answer(string: str) -> str:
    """The UMAD authors' `_replace_boxed_with_answer` (`marl/runners/multi_turn_traj_grpo.py`), line
    for line: find the last "\\boxed" (else "\\fbox"), take it with its brace-matched argument (or a
    bare "\\boxed 123" up to a "$"), and replace *every* occurrence of that text by <answer>
    (`str.replace`); an unclosed box is left as it is. `mask_last_boxed` differs on repeated boxes and
    bare ones, so the `umad` template uses this one."""
    idx = string.rfind("\\boxed")
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return string
    if "\\boxed " in string and idx == string.rfind("\\boxed "):
        boxed_content = "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
        return string.replace(boxed_content, MASKED)
    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == "{":
            num_left_braces_open += 1
        if string[i] == "}":
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1
    if right_brace_idx is not None:
        return string.replace(string[idx : right_brace_idx + 1], MASKED)
    return string


def _peer_text(peer: PeerView, task_type: str, mask_boxed: bool, null: bool) -> str:
    if null:
        return NULL_SLOT
    if not peer.full:
        return final_answer_text(task_type, peer.answer) if peer.answer is not None else NO_ANSWER
    return mask_last_boxed(peer.response) if mask_boxed else peer.response


def _question_text(row: dict, system_prompt: str | None, null: bool) -> str:
    return question_messages(row, system_prompt, null=null)[-1]["content"]


def _system(row: dict, system_prompt: str | None) -> list[dict]:
    return question_messages(row, system_prompt)[:-1]


def debate_turn(
    style: str,
    row: dict,
    system_prompt: str | None,
    *,
    own_conversation: Sequence[dict],
    own_response: str,
    own_index: int,
    peers: Sequence[PeerView],
    mask_boxed: bool = False,
) -> tuple[list[dict], list[dict]]:
    """(messages, null messages) of one debate call.

    `own_conversation` is the agent's previous call (its messages and reply as the last
    assistant turn; used by ``du`` only), `own_response` its latest reply.
    """
    if style not in TEMPLATES:
        raise ValueError(f"unknown debate template {style!r}; expected one of {TEMPLATES}")
    task_type = row["task_type"]
    out = []
    for null in (False, True):
        question = _question_text(row, system_prompt, null)
        peer_texts = [(p, _peer_text(p, task_type, mask_boxed, null)) for p in peers]
        own = NULL_SLOT if null else own_response
        if style == "du":
            user = _du_message(peer_texts, question)
            if null:
                history = [
                    *_system(row, system_prompt),
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": own},
                ]
            else:
                history = list(own_conversation)
            out.append([*history, {"role": "user", "content": user}])
            continue
        if style == "choi":
            user = _choi_message(peer_texts, own, question)
        elif style == "umad":
            peer_texts = [(p, _peer_text(p, task_type, False, null)) for p in peers]
            body = question_body(row, null=null)
            user = _umad_message(peer_texts, own, own_index, body, mask_boxed)
        else:
            user = _pairwise_message(peer_texts, own, question)
        out.append([*_system(row, system_prompt), {"role": "user", "content": user}])
    return out[0], out[1]


def _answers_line(peer_texts) -> str:
    answers = [text for p, text in peer_texts if not p.full]
    return f"\n\nFinal answers from agents in other groups: {', '.join(answers)}." if answers else ""


def _du_message(peer_texts, question: str) -> str:
    full = "".join(f"\n\nOne agent solution: ```{text}```" for p, text in peer_texts if p.full)
    head = (
        "These are the solutions to the problem from other agents:"
        if full
        else "These are the answers of other agents."
    )
    return f"{head}{full}{_answers_line(peer_texts)}\n\n{INSTRUCTIONS['du']}\n\n{question}"


def _choi_message(peer_texts, own: str, question: str) -> str:
    if len(peer_texts) == 1:
        head = f"This is the recent opinion from another agent: \n{peer_texts[0][1]}\n"
    else:
        head = "These are the recent opinions from other agents: " + "".join(
            f"\n\nOne of the agents' response: \n{text}\n" for _, text in peer_texts
        )
    return f"{head}\n\nThis was your most recent opinion:\n{own}\n\n\n{INSTRUCTIONS['choi']}\n{question}"


def _umad_message(peer_texts, own: str, own_index: int, question: str, mask_boxed: bool) -> str:
    """The authors' `merge_prompt_response(original_prompts, all_agent_responses_text, template=None)`:
    `original_prompt` the problem without its instruction (`remove_template`), the replies labelled
    "agent {agent_idx} response is: {t}" (`rollout_traj_grpo`), each masked as a whole
    (`clean_response_for_next_turn`, dataset_type "math"), joined by "\\n" in agent order."""
    responses = sorted([(own_index, own), *[(p.index, text) for p, text in peer_texts]])
    if len(responses) != 2:
        raise ValueError(
            f"template umad is the UMAD authors' two-agent prompt ('We have two answers'); got {len(responses)} agents"
        )
    labelled = [f"agent {i} response is: {text}" for i, text in responses]
    if mask_boxed:
        labelled = [umad_mask_answer(text) for text in labelled]
    return UMAD_TEMPLATE.format(
        original_prompt=question, responses="\n".join(labelled), instruction_following=UMAD_INSTRUCTION_FOLLOWING
    )


def _pairwise_message(peer_texts, own: str, question: str) -> str:
    others = "".join(f"\nOther agent response: {text}" for _, text in peer_texts)
    return (
        f"You are debating with another agent about the answer to the following question:\n{question}\n\n"
        f"Your response: {own}{others}\n\n{INSTRUCTIONS['pairwise']}"
    )


#: SDRL's training debate prompt (Liu et al., arXiv:2601.22297 §6.1, App. B-C, reconstructed: the paper shows it as an image).
SELF_DEBATE_STYLES = ("two_turn", "one_message")
SELF_DEBATE_INSTRUCTION = (
    "Carefully compare both solutions, check each step, and give your final answer to the question:"
)


def self_debate_messages(
    row: dict, system_prompt: str | None, first: str, second: str, style: str = "two_turn"
) -> list[dict]:
    """The second-turn prompt of SDRL: the question with two of the policy's own earlier solutions.

    ``two_turn``: the first solution is the model's own previous answer in the conversation, and a
    second user turn brings the other one; ``one_message``: both in one user message, labelled
    "Response 1" and "Response 2". Either way the solutions are context: only the reply is trained.
    """
    if style not in SELF_DEBATE_STYLES:
        raise ValueError(f"unknown self-debate template {style!r}; expected one of {SELF_DEBATE_STYLES}")
    question = question_messages(row, system_prompt)
    system, user = question[:-1], question[-1]["content"]
    if style == "two_turn":
        follow_up = (
            f"Here is another agent's solution to the same problem:\n\n{second}\n\n{SELF_DEBATE_INSTRUCTION}\n{user}"
        )
        return [
            *system,
            {"role": "user", "content": user},
            {"role": "assistant", "content": first},
            {"role": "user", "content": follow_up},
        ]
    message = (
        f"{user}\n\nHere are two solutions from other agents.\n\nResponse 1:\n{first}\n\n"
        f"Response 2:\n{second}\n\n{SELF_DEBATE_INSTRUCTION}\n{user}"
    )
    return [*system, {"role": "user", "content": message}]
