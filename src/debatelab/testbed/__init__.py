"""The micro testbed: builds the micro model (`debatelab.micro`) and measures what trainers do to it.

* `corpus`: every prompt the workflow renders (first answers, every protocol's debate turns, SDRL's
  self-debate, 0-10 self-reports), through the project's own prompt builders and debate engine;
* `build`: the build (TRL's SFTTrainer) of a `micro.recipe.MicroRecipe`;
* `evaluate`: a built model's accuracy per format on validation questions;
* `learning`: one run of a learning config trained from the micro model and compared with its base.

It sits above the trainers and the engine; `micro` sits below `models`, which prepares the shipped folder.
"""
