"""What a SageMaker training job costs, from its DescribeTrainingJob: each figure with the field it comes from.

SageMaker bills each instance from TrainingStartTime to TrainingEndTime (after the artifact upload), per second;
DescribeTrainingJob's BillableTimeInSeconds says how long, once the job has ended (managed spot: less than
TrainingTimeInSeconds by the saving). While it runs: the time since TrainingStartTime.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from cloudddp.catalog.bill import Bill, Figure, catalog_bill

FINAL_STATES = ("Completed", "Failed", "Stopped")


def training_bill(d: dict[str, Any]) -> Bill:
    """The bill of the job DescribeTrainingJob described as ``d``, at the catalog's price."""
    config = d.get("ResourceConfig", {})
    itype, count = str(config.get("InstanceType", "")), int(config.get("InstanceCount", 1))
    final = d.get("TrainingJobStatus") in FINAL_STATES
    billable, training = d.get("BillableTimeInSeconds"), d.get("TrainingTimeInSeconds")
    figures = [Figure("instances", count, f"× {itype}", "DescribeTrainingJob ResourceConfig")]
    billed, figure = _billed(d, final)
    figures.append(figure)
    ran = float(training) if training is not None else None
    if ran is not None:
        figures.append(Figure("training time", training, "s", "DescribeTrainingJob TrainingTimeInSeconds"))
    savings = None
    if d.get("EnableManagedSpotTraining") and final and billable is not None and training:
        savings = 1 - float(billable) / float(training)
        figures.append(
            Figure(
                "spot savings",
                f"{savings:.0%}",
                "",
                "1 − BillableTimeInSeconds / TrainingTimeInSeconds (the DescribeTrainingJob reference)",
            )
        )
    retained = (d.get("WarmPoolStatus") or {}).get("ResourceRetainedBillableTimeInSeconds")
    if retained:
        billed += float(retained)
        figures.append(
            Figure(
                "warm pool kept per instance",
                retained,
                "s",
                "DescribeTrainingJob WarmPoolStatus.ResourceRetainedBillableTimeInSeconds",
            )
        )
    processes = json.loads(d.get("HyperParameters", {}).get("sagemaker_mpi_num_of_processes_per_host", "null"))
    return catalog_bill(
        size=itype,
        nodes=count,
        billed_s=billed,
        figures=figures,
        notes=_notes(d, final),
        final=final,
        processes_per_node=processes if isinstance(processes, int) else None,
        ran_s=ran,
        savings=savings,
    )


def _billed(d: dict[str, Any], final: bool) -> tuple[float, Figure]:
    """The seconds each instance is billed for (before a warm pool's), and the figure that says where they are
    from: BillableTimeInSeconds once the job has ended, else the time since TrainingStartTime."""
    billable = d.get("BillableTimeInSeconds")
    start, end = d.get("TrainingStartTime"), d.get("TrainingEndTime")
    if final and billable is not None:
        return float(billable), Figure(
            "billable time per instance", billable, "s", "DescribeTrainingJob BillableTimeInSeconds"
        )
    if isinstance(start, datetime.datetime):
        until = end if final and isinstance(end, datetime.datetime) else datetime.datetime.now(start.tzinfo)
        billed = max(0.0, (until - start).total_seconds())
        source = (
            "DescribeTrainingJob TrainingEndTime − TrainingStartTime (no BillableTimeInSeconds)"
            if final
            else "now − DescribeTrainingJob TrainingStartTime (running: SageMaker reports "
            "BillableTimeInSeconds when the job ends)"
        )
        return billed, Figure("billed time per instance", round(billed, 3), "s", source)
    return 0.0, Figure(
        "billed time per instance",
        0,
        "s",
        "no TrainingStartTime yet: billing starts there (instances are still being prepared)",
    )


def _notes(d: dict[str, Any], final: bool) -> list[str]:
    notes = ["the ML storage volume, S3 and CloudWatch are billed apart and not included"]
    if d.get("EnableManagedSpotTraining") and not final:
        notes.append(
            "a spot job's saving shows when it ends; until then every second since TrainingStartTime "
            "counts at the on-demand price"
        )
    return notes
