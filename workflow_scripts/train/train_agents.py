from pathlib import Path

from debatelab.config import Experiment
from debatelab.llm.agent import AgentSpec
from debatelab.runlog import job_log
from debatelab.training import TrainSettings
from debatelab.training.core.launch import launch_or_train

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        exp = Experiment(snakemake.config)  # the trackers: read from the config, not params (no rerun)
        udpo = snakemake.params.udpo
        settings = TrainSettings.from_config(snakemake.params.settings)
        launch_or_train(
            processes=settings.processes(int(snakemake.resources.get("gpu", 1) or 1)),
            nodes=int(snakemake.resources.get("nodes", 1) or 1),
            accelerate_config=snakemake.params.accelerate_config,
            log_path=snakemake.log[0],
            dataset_path=snakemake.input.dataset,
            heldout_path=snakemake.input.get("heldout"),
            bases=udpo["bases"],
            participants=udpo["participants"],
            agents={name: AgentSpec.from_config(name, spec) for name, spec in udpo["agents"].items()},
            coefficients_path=snakemake.input.get("coefficients"),
            out_dirs={name: str(Path(snakemake.output.agents) / name) for name in udpo["bases"]},
            metrics_path=snakemake.output.metrics,
            curves_path=snakemake.output.curves,
            settings_path=snakemake.output.settings,
            checkpoint_dir=snakemake.params.checkpoint_dir,
            run=snakemake.wildcards.run,
            settings=settings,
            limit=snakemake.params.limit,
            report_to=exp.report_to(snakemake.wildcards.run),
            experiment=exp.name,
        )
