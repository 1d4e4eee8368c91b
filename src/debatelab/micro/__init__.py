"""The bundled micro model (`bundled:micro-chain`): a small Llama the project builds, so every trainer
can be seen to learn on a laptop's two CPU cores. This package is what the model *is* (it imports no
trainer, backend or engine, so `models` can prepare it); `debatelab.testbed` builds and measures it.

* `task`: the task (four or five one-digit terms added or subtracted) and its step-by-step solutions;
* `teacher`: the scripted, deliberately imperfect solver the model imitates;
* `tokenizer`: a byte-level BPE of a few hundred tokens fitted to the corpus, with a chat template;
* `recipe`: every setting of the build in one object;
* `shipped`: the shipped folder, its recipe and the hashes of its files.

docs/micro.md says what the micro model is evidence of, and what it is not.
"""
