"""Output schemas of the debate stage.

`results/{experiment}/debate/{dataset}/{protocol}/turns.parquet`: one row per model call of
the debate, plus the pre-debate answers (round 0, copied from the zero-shot stage), i.e. one
row per (question, thread, round, agent, call):

===================  ==========  ============================================================
column               type        meaning
===================  ==========  ============================================================
question_id          str         dataset row id
dataset              str         dataset name in the config
protocol             str         protocol name in the config
thread               int         independent debate thread (0 unless `threads` > 1)
round                int         0 = pre-debate (zero-shot) answer; 1.. = debate rounds
                                 (svr_mad: the iteration that made the call)
agent                str         participant label: agent name, "#k" for the k-th copy
agent_index          int         position in the protocol's participants
agent_config         str         the agent's name in the config
model                str         model name
call                 int         index of this call among the (question, thread, round,
                                 agent) calls (svr_mad sends several challenges per iteration)
zero_shot_sample     int         round 0: the zero-shot sample this row copies; else -1
sources              list[str]   participants whose full responses were in this call's context
answer_sources       list[str]   participants whose answers only were in the context
response             str         the reply
answer               str|null    parsed answer (null: unparseable)
correct              bool        answer matches gold
parse_failed         bool        answer is null
prompt_tokens        int         prompt length
completion_tokens    int         reply length
cached_tokens        int         of prompt_tokens, those an API served from its prompt cache
                                 (billed at the cached-input price; 0 elsewhere)
finish_reason        str         stop / length
min_logprob          float       minimum token log-probability of the reply
mean_logprob         float       mean token log-probability of the reply
mean_token_entropy   float       mean over the reply's tokens of the top-k entropy H_k, nats
                                 (k = `debate.top_logprobs`, round 0: `zero_shot.top_logprobs`;
                                 a lower bound of the full entropy; null: k = 0)
max_token_prob       float       mean over the reply's tokens of max_v p(v | prefix)
perplexity           float       exp(−mean_logprob)
conf_verbal          float       self-report / 10 (null unless elicited)
conf_seqprob         float       bias-corrected sequence probability (null unless elicited)
confidence_tokens    int         tokens spent eliciting this row's confidences
===================  ==========  ============================================================

`.../questions.parquet`: one row per (question, thread):

=====================  ========  ==========================================================
question_id            str       dataset row id
dataset, protocol      str
kind                   str       protocol kind (all_to_all, svr_mad, ...)
thread                 int       debate thread
task_type              str
gold                   str
n_agents               int       participants
participants           str       JSON list of participant labels
final_answer           str|null  the protocol's answer (null: no valid answer)
correct                bool
parse_failed           bool      final_answer is null
rounds_used            int       debate rounds run (0: no debate)
stopped_early          bool      ended before its round limit (consensus, skip, acceptance)
ended_by               str       rounds / unanimous / consensus / skip / acceptance /
                                 fallback / no_debate
ncomm                  int       directed sender→receiver transfers (full + answer-only)
ncomm_full             int       transfers of a full response
ncomm_answers          int       transfers of an answer only
debate_calls           int       model calls after round 0
debate_prompt_tokens   int
debate_completion_tokens int
pre_debate_tokens      int       prompt + completion tokens of the pre-debate calls used
total_tokens           int       pre_debate_tokens + debate prompt + completion tokens
confidence_tokens      int       tokens spent eliciting confidences (not in total_tokens)
pre_majority           str|null  plurality of the pre-debate answers
pre_correct            bool      pre_majority is correct
pre_unanimous          bool      all pre-debate answers agree (SVR-MAD filters these out)
pre_n_correct          int       agents correct before debate (SVR-MAD difficulty)
answers_by_round       str       JSON [[answer of agent i after round t, ...] for t = 0..T]:
                                 each agent's current answer after every round (carried
                                 forward when an agent made no call), for the uncertainty stage
n_options              int|null  size of the answer set: choices (multiple choice), 2 (yes/no),
                                 the label set (label tasks); null for open-ended (math)
=====================  ========  ==========================================================
"""

from __future__ import annotations

TURN_COLUMNS = [
    "question_id",
    "dataset",
    "protocol",
    "thread",
    "round",
    "agent",
    "agent_index",
    "agent_config",
    "model",
    "call",
    "zero_shot_sample",
    "sources",
    "answer_sources",
    "response",
    "answer",
    "correct",
    "parse_failed",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "finish_reason",
    "min_logprob",
    "mean_logprob",
    "mean_token_entropy",
    "max_token_prob",
    "perplexity",
    "conf_verbal",
    "conf_seqprob",
    "confidence_tokens",
]

QUESTION_COLUMNS = [
    "question_id",
    "dataset",
    "protocol",
    "kind",
    "thread",
    "task_type",
    "gold",
    "n_agents",
    "participants",
    "final_answer",
    "correct",
    "parse_failed",
    "rounds_used",
    "stopped_early",
    "ended_by",
    "ncomm",
    "ncomm_full",
    "ncomm_answers",
    "debate_calls",
    "debate_prompt_tokens",
    "debate_completion_tokens",
    "pre_debate_tokens",
    "total_tokens",
    "confidence_tokens",
    "pre_majority",
    "pre_correct",
    "pre_unanimous",
    "pre_n_correct",
    "answers_by_round",
    "n_options",
]

ENDINGS = ("rounds", "unanimous", "consensus", "skip", "acceptance", "fallback", "no_debate")
