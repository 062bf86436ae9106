"""Curated mutants of ``make mutants`` that :mod:`tests.support.mutant_list` adds at the end of its list (a module of
their own: the list is long): the stop, restart, adoption and recovery rows, each cloud's and Slurm's
rows, the frameworks' and the kept files'. Each breaks the code behind its row of docs/guarantees.md; the tests
it names, which that row cites, must fail."""

from __future__ import annotations

from tests.support.mutants import AZ, LOCAL, SLURM, SM, Mutant

ROW_MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "azure-preemption-taken-for-the-scripts-fault",
        "Azure ML: a low-priority job preempted mid-run",
        "cloudddp/backends/azureml/failures.py",
        r'(Cause.PREEMPTED, r"PreemptionError|pre-?empt(ed|ion)|\bevict(ed|ion)\b"),',
        r'(Cause.PREEMPTED, r"\bevict(ed|ion)\b"),',
        (AZ + "test_failures.py",),
    ),
    Mutant(
        "azure-failed-cluster-used",
        "Azure ML: a cluster whose creation ends `Failed`",
        "cloudddp/backends/azureml/provision.py",
        '    if str(getattr(state, "value", state) or "").lower() == "failed":  # the SDK gives an enum',
        "    if False:",
        (AZ + "test_workspace.py::test_a_cluster_whose_creation_ends_failed_stops_the_submit_and_says_what_to_do",),
    ),
    Mutant(
        "own-scripts-plan-says-nothing-of-resuming",
        "For a script other than the shared one, the plan says",
        "cloudddp/backends/checkpoints/contents.py",
        "    if not spec.checkpoint.enabled or is_shared_script(spec):",
        "    if not spec.checkpoint.enabled or not is_shared_script(spec):",
        (
            "tests/across_backends/test_your_scripts_files.py::test_the_plan_of_an_own_script_says_what_makes_a_resubmit_resume",
        ),
    ),
    Mutant(
        "unlinkable-kept-file-not-copied-in",
        "A script's own files declared in `checkpoint.files`",
        "cloudddp/injob/keepfiles.py",
        """            if kept.is_file():
                shutil.copyfile(kept, path)
""",
        "",
        (
            "tests/across_backends/test_your_scripts_files.py::"
            "test_where_no_link_can_be_made_the_file_is_copied_in_and_saved_back_and_it_says_why",
        ),
    ),
    Mutant(
        "a-file-held-open-for-writing-is-kept",
        "A file a script renames over its declared path",
        "cloudddp/injob/keepfiles.py",
        "        return [(p, v) for p, v in settled + replacing if p not in held] + quiet",
        "        return settled + replacing",
        ("tests/injob/test_keep_soon.py",),
    ),
    Mutant(
        "a-deleted-files-kept-copy-stays",
        "Kept files follow the script's rotation",
        "cloudddp/injob/keepfiles.py",
        "            self._forget_deleted()  # first: the kept set shrinks before it grows",
        "            pass",
        (
            "tests/across_backends/test_your_scripts_files.py::"
            "test_a_kept_file_the_script_deletes_leaves_the_kept_set_as_a_frameworks_rotation_expects",
        ),
    ),
    Mutant(
        "every-epoch-in-one-order",
        "The shared script is a package",
        "src_train/ddptrain/feed.py",
        "        self.sampler.set_epoch(epoch)\n",
        "",
        (
            "tests/train/test_streaming.py::"
            "test_each_epoch_has_its_own_order_a_resume_skips_exactly_the_batches_done_and_the_ranks_never_overlap",
        ),
    ),
    Mutant(
        "a-backends-mistake-hides-the-sections",
        "The user configuration and `$CLOUDDDP_HOME` are trusted",
        "cloudddp/spec/userconfig.py",
        """        try:  # the sections' own settings too, so that one mistake does not hide the others
            config.check(sections)
        except ConfigError as e:
            problems += [p for p in e.problems if p not in problems]
""",
        "",
        ("tests/spec/test_user_config.py::test_a_typo_in_backends_does_not_hide_the_sections_mistakes",),
    ),
    Mutant(
        "init-writes-the-script-under-another-name",
        "Every command in the README's quick start",
        "cloudddp/spec/scaffold.py",
        "        shutil.copyfile(own_script_template(), script)",
        '        shutil.copyfile(own_script_template(), folder / "train_template.py")',
        (
            "tests/faces/test_readme_commands.py::"
            "test_every_own_script_walkthrough_command_runs_and_the_script_shown_is_the_one_init_writes",
        ),
    ),
    Mutant(
        "local-store-listens-on-every-interface",
        "The local rendezvous cannot be taken",
        "cloudddp/backends/local/rendezvous.py",
        "        sock.bind((LOOPBACK, port))",
        '        sock.bind(("", port))',
        (LOCAL + "test_rendezvous_takeover.py::test_no_process_of_a_local_run_listens_beyond_loopback",),
    ),
    Mutant(
        "container-stop-reaches-each-rank-twice",
        "A stop gives each rank of any script one SIGTERM",
        "cloudddp/injob/container_init.py",
        "        targets.add(launcher if torchrun else pid)",
        "        targets.update({launcher, pid} if torchrun else {pid})",
        (SM + "test_container_init.py",),
    ),
    Mutant(
        "sagemaker-payload-sent-as-raw-json",
        "SageMaker: the job's exact argv",
        "cloudddp/backends/sagemaker/request.py",
        '    text = base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")',
        '    text = json.dumps(payload, separators=(",", ":"))',
        (SM + "test_toolkit_versions.py::test_awkward_arguments_arrive_byte_for_byte_on_the_images_toolkits",),
    ),
    Mutant(
        "container-init-keeps-the-sigterm",
        "SageMaker: SIGTERM to the container's PID 1",
        "cloudddp/injob/container_init.py",
        "        signal.signal(sig, forward)",
        "        signal.signal(sig, signal.SIG_DFL)",
        (SM + "test_toolkit_versions.py::test_sigterm_to_pid_1_checkpoints_and_a_second_job_resumes_from_it",),
    ),
    Mutant(
        "next-size-after-one-capacity-failure",
        "SageMaker capacity errors are resubmitted",
        "cloudddp/runs/recovery.py",
        "_capacity_failures(chain) >= chain.capacity_tries",
        "_capacity_failures(chain) >= 1",
        ("tests/runs/test_next_size_fallback.py",),
    ),
    Mutant(
        "serverless-job-without-its-tier",
        "Azure ML without `azureml.compute` runs on serverless compute",
        "cloudddp/backends/azureml/document.py",
        '        where["queue_settings"] = {"job_tier": d.compute.job_tier}\n',
        "",
        (AZ + "test_serverless.py::test_a_job_without_a_cluster_renders_as_serverless_and_loads_as_command_sends_it",),
    ),
    Mutant(
        "a-log-written-again-read-from-the-old-offset",
        "Azure ML: `metrics -f` of the `init` template",
        "cloudddp/backends/azureml/logs.py",
        "        if again or blob.size < self.offsets.get(name, 0):",
        "        if blob.size < self.offsets.get(name, 0):",
        (AZ + "test_log_files.py::test_a_log_file_written_again_after_a_restart_is_read_from_its_start",),
    ),
    Mutant(
        "mpi-local-world-size-always-1",
        'An own script that calls `init_process_group("env://")`',
        "cloudddp/injob/mpi_env.py",
        '        "LOCAL_WORLD_SIZE": env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"),',
        '        "LOCAL_WORLD_SIZE": "1",',
        (AZ + "test_launchers.py::test_an_own_script_using_env_init_runs_under_the_mpi_distribution",),
    ),
    Mutant(
        "local-torchrun-never-restarts",
        "A killed rank makes torchrun restart the group",
        "cloudddp/backends/local/build.py",
        '        "--max-restarts",\n        str(d.max_restarts),',
        '        "--max-restarts",\n        "0",',
        (
            LOCAL + "test_stop_and_resume.py::"
            "test_killed_rank_restarts_from_checkpoint_and_ends_bitwise_equal_to_an_uninterrupted_run",
        ),
    ),
    Mutant(
        "failed-rank-signal-shown-as-an-exit-code",
        "With restarts used up the run fails fast on all ranks",
        "cloudddp/backends/local/outcome.py",
        'why = f"killed by signal {-code}" if isinstance(code, int) and code < 0 else f"exit code {code}"',
        'why = f"exit code {code}"',
        (LOCAL + "test_faults.py::test_killed_rank_restarts_the_group_then_fails_fast_when_restarts_are_used_up",),
    ),
    Mutant(
        "arguments-compared-by-the-script-only",
        "A resubmit with an added argument",
        "cloudddp/backends/checkpoints/contents.py",
        "    if was is None or tuple(was) == tuple(argv):",
        "    if was is None or was[0] == argv[0]:",
        (
            LOCAL + "test_resubmit_resumes.py::"
            "test_a_resubmit_with_an_added_argument_and_with_another_node_count_resumes_from_the_last_checkpoint",
        ),
    ),
    Mutant(
        "a-lost-supervisor-never-adopted",
        "A local run whose supervisor is killed keeps training",
        "cloudddp/backends/local/__init__.py",
        "        if st.run_state.terminal or st.supervisor_pid is None:\n            return False  # ended",
        "        if st.run_state.terminal or st.supervisor_pid is not None:\n            return False  # ended",
        (
            LOCAL + "test_supervisor_loss.py::"
            "test_a_killed_supervisor_is_adopted_and_the_run_succeeds_with_every_epoch_and_the_full_log",
        ),
    ),
    Mutant(
        "unsupervised-nodes-taken-for-lost",
        "With `limits.max_recoveries`, a lost supervisor",
        "cloudddp/backends/local/__init__.py",
        "codes = [code if (code := n.exit_code()) is not None else LOST_CODE for n in nodes]",
        "codes = [LOST_CODE for n in nodes]",
        (
            LOCAL + "test_supervisor_loss.py::"
            "test_a_run_whose_nodes_ended_unsupervised_is_decided_from_what_they_recorded_and_completed_when_looked_at",
        ),
    ),
    Mutant(
        "slurm-refused-requeue-ends-as-the-trainings-code",
        "Slurm: a 2-node job preempted on a partition with GraceTime>0",
        "cloudddp/backends/slurm/script.py",
        "f'  echo \"cloudddp: scontrol requeue failed: the job ends here\" >&2; exit {PREEMPTED_EXIT}',",
        'f\'  echo "cloudddp: scontrol requeue failed: the job ends here" >&2; exit "$code"\',',
        (
            SLURM + "test_script_requeue.py::"
            "test_with_requeue_off_or_refused_a_preempted_job_ends_as_preempted_not_as_its_own_failure",
        ),
    ),
    Mutant(
        "slurm-cancel-during-the-grace-requeued",
        "Slurm, 2 nodes × 2 processes under torchrun, GraceTime 60",
        "cloudddp/backends/slurm/script.py",
        """f'if [ "$terminated" = 1 ] || [ "$state" != RUNNING ]; then echo""",
        """f'if [ "$terminated" = 1 ]; then echo""",
        (
            SLURM + "test_script_requeue.py::"
            "test_a_job_cancelled_during_its_preemption_grace_or_a_chains_stop_is_never_requeued",
        ),
    ),
    Mutant(
        "slurm-chain-never-requeues-its-next-allocation",
        "Slurm: a training whose `limits.max_runtime` exceeds",
        "cloudddp/backends/slurm/script.py",
        """            lines.append('[ "$chained" = 1 ] && requeue "the time limit of this allocation"')""",
        "            pass",
        (
            SLURM + "test_script_requeue.py::"
            "test_a_chains_allocation_is_requeued_at_its_warning_signal_and_the_last_stops_at_the_budget",
        ),
    ),
    Mutant(
        "srun-tasks-without-their-cpus",
        "Slurm: an unprivileged user runs a 2-node torchrun job",
        "cloudddp/backends/slurm/script.py",
        """        f"--cpus-per-task={cpus}",\n        "--kill-on-bad-exit=1",""",
        """        "--kill-on-bad-exit=1",""",
        (SLURM + "test_site_options_on_cluster.py::test_each_srun_task_has_its_processes_cpus_in_its_affinity",),
    ),
    Mutant(
        "slurm-environment-trusted-without-its-sha256",
        "Slurm: two jobs whose setup lines make different base Pythons",
        "cloudddp/backends/slurm/envs.py",
        """[ "$(sed -n 2p "$1/{RECORD}")" = "sha256=$(cloudddp_env_tree "$1")" ]""",
        "true",
        (
            SLURM + "test_site_options_offline.py::"
            "test_the_requirements_environment_is_built_once_checked_by_its_sha256_and_rebuilt_when_changed",
        ),
    ),
    Mutant(
        "slurm-held-job-reason-misnamed",
        "Slurm: sbatch from inside an allocation",
        "cloudddp/backends/slurm/answers.py",
        '    "JobHeldUser": "its user held it (scontrol hold, sbatch --hold)",',
        '    "JobHeldByUser": "its user held it (scontrol hold, sbatch --hold)",',
        (SLURM + "test_site_options_on_cluster.py::test_a_held_job_says_so_with_its_reason_and_runs_once_released",),
    ),
    Mutant(
        "slurm-image-imported-by-every-job-that-waited",
        "Slurm: a container image reference is imported once",
        "cloudddp/backends/slurm/images.py",
        """        '    [ -s "$image" ] && exit 0  # another job imported it while this one waited',\n""",
        "",
        (
            SLURM + "test_container_images.py::"
            "test_an_image_is_imported_once_for_concurrent_and_later_jobs_and_every_task_runs_the_file",
        ),
    ),
    Mutant(
        "slurm-login-environment-never-built",
        "Slurm: a job step with no network",
        "cloudddp/backends/slurm/build.py",
        '    if not decision.requirements_env or opts.install_on != "login":',
        '    if not decision.requirements_env or opts.install_on == "login":',
        (
            SLURM + "test_site_options_on_cluster.py::"
            "test_a_job_step_without_network_runs_with_requirements_built_at_submit_from_an_index",
        ),
    ),
    Mutant(
        "accelerate-not-told-to-use-the-cpu",
        "The scripts people already have, as they are",
        "cloudddp/runtime.py",
        '    framework = {} if on_gpu else {"ACCELERATE_USE_CPU": "true"}',
        "    framework = {}",
        (
            "tests/across_backends/test_frameworks.py::"
            "test_accelerate_on_local_2x2_trains_as_one_world_stops_into_save_state_and_resumes",
        ),
    ),
    Mutant(
        "lightning-stop-saved-beside-the-scripts-last-ckpt",
        "A Lightning or Hugging Face Trainer script with no line changed",
        "cloudddp/injob/lightning_stop.py",
        "                if isinstance(found, model_checkpoint) and found.save_last and found.dirpath:",
        "                if False:",
        (
            "tests/across_backends/test_unchanged.py::"
            "test_unchanged_lightning_stopped_on_an_epochs_last_step_then_mid_epoch_resumes_each_sample_once",
        ),
    ),
    Mutant(
        "lightning-resume-into-a-new-epoch-keeps-epoch-0s-order",
        "A Lightning or Hugging Face Trainer script with no line changed",
        "cloudddp/injob/lightning_stop.py",
        "        if not (resumed and (done or self.trainer.current_epoch)):",
        "        if not (resumed and done):",
        (
            "tests/across_backends/test_unchanged.py::"
            "test_unchanged_lightning_stopped_on_an_epochs_last_step_then_mid_epoch_resumes_each_sample_once",
        ),
    ),
    Mutant(
        "lightning-epoch-after-a-resumed-last-batch-never-started",
        "A Lightning or Hugging Face Trainer script with no line changed",
        "cloudddp/injob/lightning_stop.py",
        "        if self.restarted_mid_epoch and epochs.completed == epochs.ready:",
        "        if False:",
        (
            "tests/across_backends/test_unchanged.py::"
            "test_unchanged_lightning_stopped_on_an_epochs_last_step_then_mid_epoch_resumes_each_sample_once",
        ),
    ),
    Mutant(
        "stacks-asked-with-a-signal-nobody-answers",
        "`cloudddp stacks` shows every rank's Python stacks once",
        "cloudddp/injob/rank_stacks.py",
        "STACK_SIGNAL = int(signal.SIGRTMIN) + 5",
        "STACK_SIGNAL = int(signal.SIGRTMIN) + 6",
        (LOCAL + "test_stacks.py",),
    ),
    Mutant(
        "init-projects-share-one-checkpoint-key",
        "Two projects made by `init` with one name",
        "cloudddp/spec/scaffold.py",
        'key = f"project-{secrets.token_hex(4)}"',
        'key = "project-0"',
        (
            "tests/runs/test_checkpoint_identity.py::"
            "test_two_projects_of_one_name_an_edited_model_and_a_finished_training",
        ),
    ),
)
