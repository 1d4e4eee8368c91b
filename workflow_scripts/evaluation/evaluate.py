"""Rule evaluate: one paper's tables, vs-paper comparisons, claims and plots (debatelab.evaluation)."""

from debatelab.config import Experiment
from debatelab.evaluation import RunOutputs, evaluate_paper
from debatelab.runlog import job_log

with job_log(snakemake.log[0]):
    exp = Experiment(snakemake.config)
    inputs = snakemake.input
    outputs = RunOutputs.from_experiment(
        exp,
        question_paths=list(inputs.questions),
        turn_paths=list(inputs.turns),
        zero_shot_paths=list(inputs.zero_shot),
        uncertainty_paths=list(inputs.uncertainty),
        round_paths=list(inputs.rounds),
        training_paths=dict(zip(snakemake.params.runs, inputs.training)),
        confidence_lift_path=inputs.get("confidence_lift"),
        calibration_paths=list(inputs.get("calibration", [])),
        confidence_metric_paths=list(inputs.get("confidence_metrics", [])),
        confidence_stream_paths=list(inputs.get("confidence_streams", [])),
        prices=snakemake.params.get("prices") or {},
        gpu_jobs=snakemake.params.get("gpu_jobs", []),
        zero_shot_gpu_jobs=snakemake.params.get("zero_shot_gpu_jobs", []),
    )
    evaluate_paper(snakemake.wildcards.paper, outputs, snakemake.output[0], report_to=exp.report_to())
