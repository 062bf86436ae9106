"""The curated mutants ``make mutants`` runs (:mod:`tests.support.mutants`): each one a deliberate bug in the code
behind a row of docs/guarantees.md, and the tests that row names, which must fail. The same page lists them with
the last run's verdicts and kill ratio ("Proof by mutation")."""

from __future__ import annotations

from tests.support.mutant_rows import ROW_MUTANTS
from tests.support.mutants import AZ, LOCAL, SLURM, SM, Mutant

MUTANTS: tuple[Mutant, ...] = (
    # -- secrets, resume, the budget, the default ignores, the collective timeout, a lost create response ----------
    Mutant(
        "secrets-escaped-forms",
        "Secret values (one line or multi-line) never appear",
        "cloudddp/spec/secrets.py",
        """                forms |= {
                    piece,
                    json.dumps(piece)[1:-1],
                    json.dumps(piece, ensure_ascii=False)[1:-1],
                    repr(piece)[1:-1],
                }""",
        "                forms |= {piece}",
        (LOCAL + "test_runs.py::test_secret_values_stay_out_of_the_run_folder_and_registry",),
    ),
    Mutant(
        "resume-at-step-0-of-the-epoch",
        "SIGTERM (cancel, spot reclamation)",
        "src_train/train.py",
        't.epoch, t.step_in_epoch, t.global_step = state["epoch"], state["step_in_epoch"], state["global_step"]',
        't.epoch, t.step_in_epoch, t.global_step = state["epoch"], 0, state["global_step"]',
        (
            LOCAL
            + "test_stop_and_resume.py::"
            + "test_cancelled_run_checkpoints_and_a_resubmit_continues_without_losing_or_repeating_an_epoch",
        ),
    ),
    Mutant(
        "budget-counts-the-current-attempt-twice",
        "A run whose spend reaches `resources.max_cost`",
        "cloudddp/runs/budget.py",
        """        if attempt.run_id == run_id:
            break
""",
        "",
        (SM + "test_cost.py::test_under_recovery_the_budget_counts_every_attempt_and_a_budget_stop_ends_the_recovery",),
    ),
    *(
        Mutant(
            f"snapshot-ships-{folder.strip('.')}",
            "A code snapshot leaves out",
            "cloudddp/code/ignore.py",
            f'    "{folder}/",\n',
            "",
            (
                "tests/code/test_snapshot.py::test_each_default_ignored_folder_is_left_out_at_the_top_and_inside_a_code_folder",
            ),
        )
        for folder in ("checkpoints", "outputs", ".venv", "node_modules")
    ),
    Mutant(
        "collective-timeout-hard-coded-600-s",
        "A rank that stops participating",
        "src_train/ddptrain/distributed.py",
        "timeout = datetime.timedelta(seconds=timeout_s)",
        "timeout = datetime.timedelta(seconds=600)",
        (
            LOCAL + "test_stop_and_resume.py::"
            "test_a_rank_that_stops_participating_fails_the_run_within_the_collective_timeout",
        ),
    ),
    Mutant(
        "lost-create-response-always-re-raised",
        "Throttling, 5xx and a lost CreateTrainingJob response",
        "cloudddp/backends/sagemaker/launch.py",
        'if e.response["Error"].get("Code") not in ("ResourceInUse", "ValidationException") or not exists(sm, name):',
        "if True or not exists(sm, name):",
        (SM + "test_emulator.py::test_throttling_5xx_and_a_lost_response_are_survived_without_a_duplicate",),
    ),
    # -- one per further row ----------------------------------------------------------------------------
    Mutant(
        "sagemaker-retry-creates-again",
        "A retried submit finds its job",
        "cloudddp/backends/sagemaker/launch.py",
        "if exists(sm, name):  # launched before",
        "if False:  # launched before",
        (SM + "test_emulator.py::test_a_retried_submit_does_not_start_a_second_job",),
    ),
    Mutant(
        "azureml-retry-submits-again",
        "A retried submit finds its job",
        "cloudddp/backends/azureml/launch.py",
        "        client.jobs.get(name)\n",
        '        client.jobs.get(name + "-not-this-one")\n',
        (AZ + "test_sdk_offline.py::test_second_submit_of_unchanged_code_uploads_nothing_and_a_retry_finds_its_job",),
    ),
    Mutant(
        "corrupt-checkpoint-loaded",
        "A checkpoint torn mid-write or corrupted",
        "src_train/ddptrain/checkpoint.py",
        "if hashlib.sha256(payload).hexdigest() != expected:",
        "if False:",
        ("tests/train/test_script.py::test_resume_continues_at_the_next_epoch_and_corrupt_checkpoints_are_skipped",),
    ),
    Mutant(
        "archive-member-climbs-out",
        "Packaging cannot escape the code folder",
        "cloudddp/code/snapshot.py",
        'if name.startswith("/") or ".." in parts or not parts:',
        "if not parts:",
        ("tests/code/test_snapshot.py::test_archive_member_names_never_climb_out",),
    ),
    Mutant(
        "bad-input-exits-1",
        "Bad input exits 2",
        "cloudddp/errors.py",
        "    exit_code = 2\n",
        "    exit_code = 1\n",
        ("tests/spec/test_bad_input.py::test_broken_spec_gets_exit_2_and_a_one_screen_message",),
    ),
    Mutant(
        "secrets-checked-after-launch-starts",
        "A variable that `env.X.from_env` names but the shell lacks",
        "cloudddp/backends/base.py",
        "        plan.secret_values()  # a variable env.X.from_env names",
        "        # plan.secret_values()  # a variable env.X.from_env names",
        (
            "tests/backends/test_launch_refusals.py",
            AZ + "test_secrets.py::"
            "test_a_secret_variable_missing_from_the_shell_stops_the_submit_before_anything_is_created",
        ),
    ),
    Mutant(
        "registry-wal-switch-not-retried",
        "12 parallel submissions keep the registry consistent",
        "cloudddp/runs/database.py",
        'if "locked" not in str(e) or time.monotonic() > deadline:',
        "if True:",
        (
            "tests/runs/test_registry_concurrency.py::"
            "test_a_wal_switch_refused_as_locked_is_asked_again_and_another_error_is_not",
            "tests/runs/test_registry_concurrency.py::test_a_new_registry_opened_by_many_processes_at_once_loses_no_writer",
        ),
    ),
    Mutant(
        "cancel-while-stopping-sends-again",
        "`cancel` is idempotent on every backend",
        "cloudddp/backends/base.py",
        """        if state is RunState.STOPPING:
            return True  # a stop is under way""",
        """        if state is None:
            return True  # a stop is under way""",
        ("tests/backends/test_contract.py::test_cancel_is_idempotent",),
    ),
    Mutant(
        "local-cancel-not-stopping-during-the-grace",
        "`cancel` is idempotent on every backend",
        "cloudddp/backends/local/__init__.py",
        "elif not state.terminal and st.cancel_requested:",
        "elif False:",
        ("tests/backends/test_contract.py::test_cancel_is_idempotent",),
    ),
    Mutant(
        "resume-at-step-0-of-the-epoch-on-slurm",
        "Slurm: a requeued job resumes with every step once",
        "src_train/train.py",
        't.epoch, t.step_in_epoch, t.global_step = state["epoch"], state["step_in_epoch"], state["global_step"]',
        't.epoch, t.step_in_epoch, t.global_step = state["epoch"], 0, state["global_step"]',
        (
            "tests/backends/slurm/test_runs.py::"
            "test_a_requeued_two_node_job_resumes_from_its_checkpoint_and_runs_every_step_once",
        ),
    ),
    Mutant(
        "restarted-watcher-never-resubmits",
        "A recovery watcher that died",
        "cloudddp/runs/recovery.py",
        "            _launch(chain, runner, plan, checks=False, size=size, left_out=left_out)\n",
        "            pass\n",
        ("tests/runs/test_recovery.py::test_a_watcher_that_died_is_started_again_by_recover_and_finishes_the_chain",),
        bound=150,  # the chain it never resubmits would be waited for 180 s; unmutated the test takes about 70 s
    ),
    Mutant(
        "own-code-failure-resubmitted",
        "A failure of the script's own code is never resubmitted",
        "cloudddp/runs/recovery.py",
        "elif not cause.recoverable:",
        "elif False:",
        ("tests/runs/test_recovery.py::test_a_failure_of_the_scripts_own_code_is_not_retried",),
    ),
    Mutant(
        "template-ignores-sigterm",
        "An input inside `code.dir` is uploaded once",
        "cloudddp/data/train_template.py",
        "    signal.signal(signal.SIGTERM, on_sigterm)\n",
        "",
        (
            "tests/faces/test_newcomer_first_hour.py::test_a_cancelled_own_script_checkpoints_and_its_log_ends_without_a_traceback",
        ),
    ),
    Mutant(
        "second-copy-of-a-training-allowed",
        "Two submits of one training at once",
        "cloudddp/backends/folderlock.py",
        'if data.get("run_id") not in (None, run_id) and self.alive(data):',
        "if False:",
        (
            "tests/backends/local/test_supervisor_loss.py::"
            "test_a_checkpoint_folder_is_held_while_a_holder_lives_and_taken_over_after",
            "tests/backends/local/test_supervisor_loss.py::"
            "test_a_second_copy_of_a_training_refuses_naming_the_holder_and_cancel_stops_an_adopted_run",
        ),
    ),
    Mutant(
        "a-node-ended-only-once-its-recording-shell-has-left",
        "With `limits.max_recoveries`, a lost supervisor never starts a second attempt",
        "cloudddp/backends/local/nodes.py",
        "return recorded_exit(self.exit_file) is not None or not self.running()",
        "return not self.running()",
        (
            "tests/backends/local/test_supervisor_loss.py::"
            "test_a_node_whose_shell_recorded_its_exit_has_ended_while_that_shell_is_still_leaving",
        ),
    ),
    Mutant(
        "a-starting-dataloader-worker-hears-sigterm-until-its-init-fn",
        "A stop gives each rank of any script one SIGTERM",
        "cloudddp/injob/stop_hooks.py",
        """        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # threads started later inherit the mask
        self.init_fn = init_fn""",
        """        self.init_fn = init_fn""",
        ("tests/injob/test_stop_hooks.py::test_a_worker_signalled_before_the_loaders_init_fn_runs_is_spared_too",),
    ),
    Mutant(
        "any-control-sequence-obeyed",
        "`logs`, `metrics` and the live view obey no control sequence but colour",
        "cloudddp/observe/console.py",
        r'r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"',
        r'r"|[\x00-\x00]"',
        (
            "tests/observe/test_terminal_output.py::test_printable_keeps_colour_and_shows_every_other_control_sequence_as_text",
        ),
    ),
    Mutant(
        "azure-cluster-name-rule-loosened",
        "Azure ML renders what the service runs and refuses",
        "cloudddp/backends/azureml/limits.py",
        'CLUSTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{2,23}$")',
        'CLUSTER_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{2,63}$")',
        (AZ + "test_render.py::test_what_the_service_would_refuse_exits_2_at_render_naming_the_rule",),
    ),
    Mutant(
        "spec-file-with-a-literal-secret-shipped",
        "A literal secret in a spec file inside `code.dir`",
        "cloudddp/code/snapshot.py",
        "        if any(value.encode() in text for value in secrets):\n",
        "        if False:\n",
        (
            "tests/code/test_secret_spec_files.py::"
            "test_spec_files_holding_a_literal_secret_are_left_out_with_a_warning_and_listed",
        ),
    ),
    Mutant(
        "traceback-glued-to-a-bar",
        "Progress bars stay readable",
        "cloudddp/injob/output_lines.py",
        'return [state[:at] + "\\n", state[at:] + "\\n"] if at > 0 else [state + "\\n"]',
        'return [state + "\\n"]',
        ("tests/injob/test_progress_lines.py::test_a_traceback_printed_behind_a_bar_starts_a_line_of_its_own",),
    ),
    Mutant(
        "status-json-takes-a-misspelt-key",
        "A local run's `status.json` is a typed record",
        "cloudddp/backends/local/record.py",
        '        raise TypeError(f"status.json has no key',
        '        print(f"status.json has no key',
        (
            LOCAL + "test_run_record.py::"
            "test_a_misspelt_key_or_a_value_of_the_wrong_type_is_refused_and_nothing_is_written",
        ),
    ),
    Mutant(
        "cancel-gives-no-grace-before-sigkill",
        "`limits.max_runtime` stops a local run as a limit",
        "cloudddp/backends/local/supervisor.py",
        "        end = time.time() + grace\n",
        "        end = time.time()\n",
        (LOCAL + "test_limits.py::test_cancel_escalates_to_sigkill_after_the_grace_and_leaves_no_process",),
    ),
    Mutant(
        "stall-watchdog-never-fires",
        "An own script that hangs after its first epoch fails within",
        "cloudddp/backends/local/supervisor.py",
        "            if quiet is not None:\n                self._stalled(quiet)",
        "            if False:\n                self._stalled(quiet)",
        (
            LOCAL + "test_stall_watchdog.py::"
            "test_a_script_that_hangs_after_its_first_epoch_fails_as_stalled_with_the_stuck_ranks_stack",
        ),
        bound=120,  # the verdict that never comes would be waited for 180 s; unmutated the test takes about 55 s
    ),
    Mutant(
        "hang-doctor-never-reports",
        "A rank asleep mid-epoch while the others wait in a collective",
        "cloudddp/injob/hang.py",
        "    if why is None or not DOCTOR or DOCTOR[0].reported:",
        "    if True:",
        (LOCAL + "test_hang_culprit.py",),
    ),
    Mutant(
        "hang-recovery-keeps-the-culprits-node",
        "A rank asleep mid-epoch while the others wait in a collective",
        "cloudddp/runs/recovery.py",
        '    culprit = failure.get("culprit_host") if status.cause is Cause.HANG else None',
        "    culprit = None",
        (
            "tests/runs/test_recovery_decisions.py::"
            "test_a_hangs_culprit_host_is_left_out_of_every_later_attempt_and_slurm_excludes_it",
            SLURM + "test_hang.py",
        ),
    ),
    Mutant(
        "failed-rank-is-the-first-torchrun-names",
        "The failed rank is the one whose failure caused the others'",
        "cloudddp/backends/torchrun.py",
        "candidates = [entry for entry in entries if -entry.failed.exitcode not in sent.get(entry.pid, set())]"
        " or entries",
        "candidates = entries",
        ("tests/backends/test_torchrun_agents.py::test_a_rank_that_torchrun_itself_stopped_is_never_thefailed_rank",),
    ),
    Mutant(
        "time-cadence-never-due",
        "`checkpoint.every_minutes` writes checkpoints mid-epoch",
        "src_train/ddptrain/loop.py",
        "return self.seconds > 0 and time.monotonic() - self.last >= self.seconds",
        "return False",
        ("tests/train/test_script.py::test_checkpoint_minutes_writes_checkpoints_mid_epoch_and_the_epoch_goes_on",),
    ),
    Mutant(
        "rank-files-not-masked-while-running",
        "A secret printed by a running local job",
        "cloudddp/backends/local/masking.py",
        '            os.pwrite(fd, b"*" * (end - begin), offset + begin)\n',
        "            pass\n",
        (
            LOCAL + "test_secret_masking.py::"
            "test_a_secret_printed_by_a_running_job_is_in_no_file_of_its_run_while_it_still_runs",
        ),
    ),
    Mutant(
        "a-restarted-group-reuses-the-store",
        "A restarted group (`limits.max_restarts`) starts with a store of its own",
        "cloudddp/backends/torchrun.py",
        "_Handler.next_rendezvous = _anew\n",
        "_Handler.next_rendezvous = _next_round\n",
        (
            "tests/backends/test_torchrun_agents.py::"
            "test_each_round_of_the_rendezvous_forgets_the_last_rounds_store_and_torchs_opt_out",
        ),
    ),
    Mutant(
        # Its test fails once the attempt ends. A watcher that never resubmits, which this test would wait out for
        # minutes, is restarted-watcher-never-resubmits (the same recovery code, under a bound).
        "a-lost-node-group-taken-for-the-scripts-fault",
        "A run ended by the cloud (preemption, capacity, a lost node) is resubmitted",
        "cloudddp/backends/local/outcome.py",
        '    cause = Cause.INFRASTRUCTURE if info.get("lost") else Cause.USER_ERROR',
        "    cause = Cause.USER_ERROR",
        (
            "tests/runs/test_recovery.py::"
            "test_a_lost_node_group_is_recovered_after_the_cli_exits_and_the_model_is_bitwise_equal",
        ),
    ),
    Mutant(
        "default-bucket-without-its-region",
        "SageMaker S3: the default bucket is created in eu-west-1",
        "cloudddp/backends/sagemaker/storage.py",
        "config = {} if region == NO_LOCATION_CONSTRAINT else "
        '{"CreateBucketConfiguration": {"LocationConstraint": region}}',
        "config = {}",
        (
            SM + "test_emulator.py::"
            "test_the_default_bucket_is_created_in_eu_west_1_and_every_call_to_it_names_its_owner",
        ),
    ),
    Mutant(
        "a-file-others-may-write-is-trusted",
        "State another user could plant is refused or checked",
        "cloudddp/paths.py",
        '    if st.st_mode & 0o022:\n        raise UnsafeFolder(\n            f"{what} {real} is writable by others',
        '    if False:\n        raise UnsafeFolder(\n            f"{what} {real} is writable by others',
        (LOCAL + "test_planted_state.py::test_a_status_file_others_could_write_is_refused_and_cancel_signals_nothing",),
    ),
    Mutant(
        "folders-past-a-link-are-trusted",
        "State another user could plant is refused or checked",
        "cloudddp/paths.py",
        "            if pending:\n                _judge_folder(",
        "            if pending and not links:\n                _judge_folder(",
        (
            LOCAL + "test_planted_state.py::"
            "test_a_status_file_or_run_folder_linked_to_an_open_or_foreign_place_is_refused_and_cancel_signals_nothing",
            LOCAL + "test_planted_state.py::"
            "test_a_checkpoint_folder_linked_to_an_open_or_foreign_place_or_a_lock_others_could_write_is_refused",
        ),
    ),
    Mutant(
        "lightning-rows-read-again-after-a-new-header",
        "Metrics come from the frameworks' own logs on every backend",
        "cloudddp/injob/framework_logs.py",
        "self.header, self.offset, skip = header, len(header), self.rows",
        "self.header, self.offset, skip = header, len(header), 0",
        (
            "tests/injob/test_framework_logs.py::"
            "test_lightning_csv_rows_are_read_once_each_even_when_lightning_rewrites_the_header",
        ),
    ),
    Mutant(
        "every-ranks-lines-carry-metrics",
        "A 2-node × 2-process run where every rank prints the same measurement",
        "cloudddp/observe/metrics.py",
        "return rank == 0 or (ranks == EVERY_RANK and rank is not None)",
        "return rank is not None",
        (
            "tests/across_backends/test_metric_meaning.py::"
            "test_declared_metrics_are_read_from_global_rank_0_only_unless_the_job_reads_every_rank",
            "tests/across_backends/test_metric_meaning_on_real_runs.py::"
            "test_locally_metrics_are_rank_0s_in_the_attached_view_and_metrics_json_and_every_line_names_its_rank",
        ),
    ),
    Mutant(
        "every-ranks-records-read-as-rank-0s",
        "`metrics.ranks: all` gives each rank's records",
        "cloudddp/observe/metrics.py",
        "return rank == 0 or (ranks == EVERY_RANK and rank is not None)",
        "return rank == 0",
        (
            "tests/across_backends/test_metric_meaning_on_real_runs.py::"
            "test_locally_a_job_that_reads_every_ranks_metrics_gets_each_ranks_records_naming_it",
        ),
    ),
    Mutant(
        "collector-left-off-after-start-up",
        "What makes a short command fast keeps every meaning",
        "cloudddp/cli/app.py",
        "            gc.freeze()\n            gc.enable()\n",
        "            gc.freeze()\n",
        (
            "tests/project/test_startup.py::"
            "test_a_warm_cache_spares_pydantic_its_plugin_scan_and_the_collector_runs_again_after_start_up",
        ),
    ),
    Mutant(
        "a-module-imported-inside-a-function",
        "The layers hold",
        "cloudddp/errors.py",
        "\n\nclass CloudDDPError(Exception):",
        "\n\ndef _late() -> None:\n    from cloudddp import paths  # noqa: F401\n\n\nclass CloudDDPError(Exception):",
        ("tests/project/test_layers.py::test_no_module_of_cloudddp_is_imported_inside_a_function",),
    ),
    Mutant(
        "slurm-stop-before-limit-unbounded",
        "Slurm: bad input",
        "cloudddp/backends/slurm/options.py",
        """    stop_before_limit: Duration = Field(
        180,
        le=65535,""",
        """    stop_before_limit: Duration = Field(
        180,""",
        (
            "tests/backends/slurm/test_site_options_offline.py::"
            "test_bad_slurm_input_exits_2_naming_the_field_the_line_and_what_to_do",
        ),
    ),
    Mutant(
        "resume-note-forgets-other-files",
        "The plan's resume note names only what the checkpoint folder holds",
        "cloudddp/backends/checkpoints/contents.py",
        "    if found.others:\n",
        "    if False:\n",
        ("tests/across_backends/test_checkpoint_folder.py",),
    ),
    Mutant(
        "spot-counted-against-the-family",
        "Azure ML as its REST examples answer",
        "cloudddp/backends/azureml/quota.py",
        'kind = "lowprioritycores" if pool == "lowpriority" else "dedicatedcores"',
        'kind = "dedicatedcores"',
        (AZ + "test_sdk_offline.py::test_a_spot_job_counts_against_the_regional_low_priority_quota_not_the_family",),
    ),
    Mutant(
        "a-hook-missing-from-the-contracts-docstring",
        "The backend guide (`docs/writing-a-backend.md`) and `base.py`'s docstring name every hook",
        "cloudddp/backends/base.py",
        "``_bill(run_id) -> Bill | None`` (None: no figures)",
        "(None: no figures)",
        ("tests/backends/test_guide.py::test_base_docstring_lists_the_same_hooks",),
    ),
    Mutant(
        "local-cpu-hours-lost",
        "`cloudddp cost` reports each backend's own figures",
        "cloudddp/backends/local/bill.py",
        "    return cpu / 3600\n",
        "    return 0.0\n",
        (
            "tests/runs/test_cost_and_budget.py::"
            "test_cost_of_a_finished_local_run_and_its_step_time_feeds_the_next_estimate",
        ),
    ),
    Mutant(
        "sdk-messages-reach-the-terminal",
        "The clouds' SDK messages go to `sdk.log`",
        "cloudddp/observe/sdklog.py",
        "        if _DIVERSION.handler is not None and _is_sdk(self.name) and _to_terminal(hdlr):\n",
        "        if False:\n",
        (
            "tests/across_backends/test_metric_meaning.py::"
            "test_the_sdks_own_messages_go_to_a_file_and_cloudddps_stay_on_the_terminal",
        ),
    ),
    Mutant(
        "validate-names-only-the-first-missing-setting",
        "`validate -b BACKEND` names every setting the backend needs",
        "cloudddp/backends/checks.py",
        "        self.problems = [m.line() for m in missing]\n",
        "        self.problems = [m.line() for m in missing[:1]]\n",
        (
            "tests/faces/test_newcomer_first_hour.py::"
            "test_validate_with_a_backend_names_every_missing_setting_at_once_with_an_example",
        ),
    ),
    Mutant(
        "typed-requests-take-unknown-keys",
        "Slurm's and local's requests are typed",
        "cloudddp/plan.py",
        '__pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}',
        '__pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "ignore"}',
        (
            "tests/project/test_plan_requests.py::"
            "test_a_key_the_type_does_not_have_is_refused_and_a_record_with_other_keys_reads_its_own",
        ),
    ),
    Mutant(
        "placeholder-without-closest-name",
        "One spec serves every shape",
        "cloudddp/spec/placeholders.py",
        "close = difflib.get_close_matches(name, known, n=1)",
        "close: list[str] = []",
        (
            "tests/across_backends/test_placeholders.py::test_an_unknown_placeholder_fails_at_load_with_its_line_and_the_closest_name",
        ),
    ),
    Mutant(
        "shape-limit-raised",
        "No function in `cloudddp/` is over 80 lines",
        "tests/support/shape.py",
        "FUNCTION_LINES, MODULE_LINES = 80, 500",
        "FUNCTION_LINES, MODULE_LINES = 800, 5000",
        ("tests/project/test_shape.py",),
    ),
    Mutant(
        "ci-misses-collection-skips",
        "On CI a rig that cannot start fails the run",
        "tests/conftest.py",
        """    controller sees the workers' skipped collections here too.\"\"\"
    _note_skip(report)""",
        """    controller sees the workers' skipped collections here too.\"\"\"""",
        ("tests/project/test_proof.py::test_on_ci_a_module_skipped_at_collection_fails_the_run",),
    ),
    # -- Slurm ------------------------------------------------------------------------------------------------
    Mutant(
        "slurm-end-record-ignored",
        "Slurm: a finished run keeps its end once Slurm forgets the job",
        "cloudddp/backends/slurm/status.py",
        '    return from_ended(shell.tail(f"{run_dir}/{ENDED_FILE}", 4096)) if run_dir else None',
        "    return None",
        (SLURM + "test_forgotten_jobs.py",),
    ),
    Mutant(
        "known-end-downgraded-to-unknown",
        "Slurm: a finished run keeps its end once Slurm forgets the job",
        "cloudddp/runs/runner.py",
        "    if record is None or status.state is not RunState.UNKNOWN:",
        "    if True:",
        (SLURM + "test_forgotten_jobs.py::test_a_failed_run_stays_failed_and_a_seen_end_is_never_downgraded",),
    ),
    Mutant(
        "slurm-srun-ranks-bind-the-store",
        "Slurm: no process joins a rendezvous listener it did not bind",
        "cloudddp/backends/slurm/rendezvous.py",
        " TORCHELASTIC_USE_AGENT_STORE=True",
        "",
        (SLURM + "test_rendezvous_squat.py",),
    ),
    Mutant(
        "slurm-taken-port-joined",
        "Slurm: no process joins a rendezvous listener it did not bind",
        "cloudddp/backends/slurm/agent.py",
        """        if endpoint == "{TAKEN}":
            sys.exit({PORT_TAKEN_EXIT})
""",
        "",
        (SLURM + "test_srun_store.py",),
    ),
    # -- placement, failover and the checkpoints that travel -----------------------------------------------
    Mutant(
        "carry-trusts-what-it-wrote",
        "A run that moves between backends",
        "cloudddp/backends/checkpoints/carry.py",
        "    if held != read:",
        "    if False:",
        ("tests/runs/test_carry.py",),
    ),
    Mutant(
        "carry-trusts-a-corrupt-source",
        "A run that moves between backends",
        "cloudddp/backends/checkpoints/carry.py",
        "    if want is not None and read != want:",
        "    if False:",
        ("tests/runs/test_carry.py",),
    ),
    Mutant(
        "auto-ranks-by-preference-only",
        "`-b auto` ranks the job's backends",
        "cloudddp/runs/placement.py",
        "        return (late, figure is None, figure or 0.0, self.preference)",
        "        return (late, False, 0.0, self.preference)",
        ("tests/runs/test_placement.py",),
    ),
    Mutant(
        "auto-reads-a-start-time-as-a-wait",
        "`-b auto` ranks the job's backends",
        "cloudddp/runs/placement.py",
        "        placement.starts_in = max(0.0, start - time.time())",
        "        placement.starts_in = max(0.0, start)",
        (
            "tests/runs/test_placement_wired.py::"
            "test_slurms_start_estimate_is_read_from_sbatch_test_only_and_ranks_it_first_when_soon_last_when_late",
        ),
    ),
    Mutant(
        "slurm-ignores-the-checkpoint-key",
        "A resubmit with an added argument, and one on another node count",
        "cloudddp/backends/slurm/paths.py",
        '    folder = checkpoint_folder(spec, f"{layout.workdir}/checkpoints")',
        '    unkeyed = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"key": None})})\n'
        '    folder = checkpoint_folder(unkeyed, f"{layout.workdir}/checkpoints")',
        (
            "tests/across_backends/test_checkpoint_folder.py::"
            "test_every_backend_keeps_the_folder_across_arguments_and_sizes_and_a_named_variant_gets_its_own",
        ),
    ),
    Mutant(
        "every-failure-moves-the-run",
        "`-b auto` ranks the job's backends",
        "cloudddp/runs/recovery.py",
        "    elif cause.value in chain.moves_on and chain.placements:",
        "    elif chain.placements:",
        ("tests/runs/test_placement.py",),
    ),
    Mutant(
        "a-move-carries-nothing",
        "`-b auto` ranks the job's backends",
        "cloudddp/backends/checkpoints/carry.py",
        "    if here is None or there is None or (source.name == dest.name and here == there):",
        "    if True:",
        (
            "tests/across_backends/test_placement.py::"
            "test_a_run_preempted_on_azure_ml_resumes_on_slurm_from_its_azure_checkpoint_each_step_once",
        ),
    ),
    *ROW_MUTANTS,
)
