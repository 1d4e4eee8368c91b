"""Output schema of the zero-shot stage (`results/{experiment}/zero_shot/{dataset}/{agent}.parquet`), one row per
(question, sample):

=================  ========  ==========================================================
column             type      meaning
=================  ========  ==========================================================
question_id        str       the dataset row's `id`
dataset            str       dataset name in the config
agent              str       agent name in the config
model              str       model name the agent runs
round              int       always 0: the pre-debate answer every protocol starts from
sample             int       sample index (0 .. samples-1)
task_type          str       math / multiple_choice / yes_no / label
response           str       the full reply
answer             str|null  parsed answer (null: nothing parseable, graded wrong)
gold               str       reference answer
correct            bool      answer matches gold
parse_failed       bool      answer is null
prompt_tokens      int       prompt length of the answer call
completion_tokens  int       reply length
cached_tokens      int       of prompt_tokens, those an API served from its prompt cache (billed at
                             the cached-input price; 0 for local engines and servers that don't say)
finish_reason      str       stop / length
mean_logprob       float     mean token log-probability of the reply
min_logprob        float     minimum token log-probability of the reply (SID-ET, SVR-MAD prior)
mean_token_entropy float     mean over the reply's tokens of the top-k entropy H_k, nats (k =
                             `zero_shot.top_logprobs`; a lower bound of the full entropy; null: k = 0)
max_token_prob     float     mean over the reply's tokens of max_v p(v | prefix) (null: k = 0)
perplexity         float     exp(−mean_logprob)
conf_verbal        float     self-report, mean of k 0-10 ratings / 10 (0.5 if none parsed)
verbal_parsed      int       how many of the k ratings parsed
conf_seqprob       float     σ(C), C = log P(ŷ|x) − log P(ŷ|x_null), length-normalised
seqprob_logp       float     log P(ŷ|x), mean per token
seqprob_logp_null  float     log P(ŷ|x_null), mean per token
seqprob_c          float     C
extra_tokens       int       prompt + completion tokens spent on confidence estimation
=================  ========  ==========================================================

Estimators that are switched off leave their columns null. The token-level columns
(`debatelab.estimators.tokens`) are read off the answer's own generation: no extra calls.
"""

from __future__ import annotations

ZERO_SHOT_COLUMNS = [
    "question_id",
    "dataset",
    "agent",
    "model",
    "round",
    "sample",
    "task_type",
    "response",
    "answer",
    "gold",
    "correct",
    "parse_failed",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "finish_reason",
    "mean_logprob",
    "min_logprob",
    "mean_token_entropy",
    "max_token_prob",
    "perplexity",
    "conf_verbal",
    "verbal_parsed",
    "conf_seqprob",
    "seqprob_logp",
    "seqprob_logp_null",
    "seqprob_c",
    "extra_tokens",
]
