"""The bundled micro model (`bundled:micro-chain`): a small Llama the project builds, so every trainer
can be seen to learn on a laptop's two CPU cores.

* `task`: the task (four or five one-digit terms added or subtracted) and its step-by-step solutions;
* `teacher`: the scripted, deliberately imperfect solver the model imitates;
* `corpus`: every prompt the workflow renders (first answers, every protocol's debate turns, SDRL's
  self-debate, 0-10 self-reports), through the project's own prompt builders and debate engine;
* `tokenizer`: a byte-level BPE of a few hundred tokens fitted to the corpus, with a chat template;
* `recipe`, `build`: every setting of the build in one object, and the build (TRL's SFTTrainer);
* `evaluate`: the built model's accuracy per format on validation questions.

docs/micro.md says what the micro model is evidence of, and what it is not.
"""
