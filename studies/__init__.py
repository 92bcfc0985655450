"""Studies whose results the docs quote, run by hand as ``python -m studies.<name>`` from the
project root.  They are not DVC stages: each is a search that runs for tens of minutes to hours,
a one-off measurement, or a tool that trains or tunes a model by hand for comparison, and the
pipeline (dvc.yaml) never reads what they write.  Without ``--out`` they write under /tmp or
under ``studies-out/`` (git-ignored), never into data/, models/ or metrics/.  The speed
benchmarks are in ``benchmarks/``.

Why each module is not a stage:

- ``action_frequencies``: a one-off look at what the machine policies do with the last
  ``dvc repro``'s test tasks (per intensity bin, CPU and GPU shares); it prints and writes nothing.
- ``cluster_quality``: a one-off comparison of every cluster node policy on rate-scaled copies of
  the test split (tens of minutes), behind docs/findings/cluster.md.
- ``cluster_queue``: a tool that trains the cluster queue mode's learned order by hand and sets it
  against eft and cem (fade scans, node samples: docs/findings/cluster.md); the pipeline's
  ``learned_queue`` is trained by the train_late stage with the same search
  (kinds/cluster/queue_train.py).
- ``fgd_sensitivity``: a one-off measurement of how the FGD comparison moves with each rule of
  the Go simulator (630 runs), behind docs/fgd-atc23.md.
- ``late_eval``: the late-dispatch investigations behind docs/machine.md (tuning runs of 1,000
  trials, the load sweep, the Gantt chart, the noise seeds, training dqn_late and pg_late by hand
  with other settings); the ``scenarios`` stage writes the pipeline's own table.
- ``late_offline``: a long offline, clairvoyant search over task orders and splits (up to a
  million whole runs of a scenario, up to an hour a run); not a policy, a point between the LP
  bound and the policies.
- ``late_rollout``: a one-off grid over rollout_late's candidates and shares; the pick is in
  conf/policies/machine/rollout_late.yaml.
- ``late_tune_mixture``: a comparison bar: the late heuristics tuned by hand on the learned
  policies' training mixture (300 trials); the pipeline's weights come from the tune_heuristics
  stage, on the training split.
- ``load_sweep``: every policy's mean and P99 latency against offered load on one workload, with
  both bounds (minutes per point with the LP); the ``scenarios`` stage runs the pipeline's own
  load sweep.
- ``lp_grid``: a one-off measurement of the LP bound's slack per grid and piece-cut count on one
  scenario (minutes per fine grid).
- ``quality_eval``: the quality study behind docs/findings/machine.md: per workload it trains the
  run-time model and the DQN and tunes every heuristic by hand (20 to 40 minutes), then sets every
  policy against the bounds.
- ``real``: the serving kind served for real on this machine's CPU beside the simulator
  (``sim_vs_real``); wall-clock measurements differ on every machine, so no stage output can
  hold them.
- ``quality_headroom``: a one-off measurement of the room the eft_rank family leaves, with
  in-sample Optuna searches per workload (tens of minutes) that no policy may use.
"""
