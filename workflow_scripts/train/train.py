from debatelab.config import Experiment
from debatelab.llm.agent import AgentSpec
from debatelab.runlog import job_log
from debatelab.training import TrainSettings
from debatelab.training.core.launch import launch_or_train

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        exp = Experiment(snakemake.config)  # the trackers: read from the config, not params (no rerun)
        name = snakemake.params.policy_name  # the one agent it trains
        launch_or_train(
            processes=int(snakemake.resources.get("gpu", 1) or 1),
            nodes=int(snakemake.resources.get("nodes", 1) or 1),
            accelerate_config=snakemake.params.accelerate_config,
            log_path=snakemake.log[0],
            dataset_path=snakemake.input.dataset,
            heldout_path=snakemake.input.get("heldout"),
            bases={name: snakemake.input.model},
            agents={name: AgentSpec.from_config(name, snakemake.params.policy)},
            out_dirs={name: snakemake.output.model},
            metrics_path=snakemake.output.metrics,
            curves_path=snakemake.output.curves,
            settings_path=snakemake.output.settings,
            checkpoint_dir=snakemake.params.checkpoint_dir,
            run=snakemake.wildcards.run,
            settings=TrainSettings.from_config(snakemake.params.settings),
            limit=snakemake.params.limit,
            report_to=exp.report_to(snakemake.wildcards.run),
            experiment=exp.name,
        )
