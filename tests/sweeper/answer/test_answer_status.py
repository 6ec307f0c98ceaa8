"""The decisions read from stored verifications: the answer's status, what export says of a
failed answer, and the verification table's cells (status colour, the control)."""

from __future__ import annotations

import json

import pytest

from storage import Control, VerificationStatus, VerificationStore, study_status
from sweeper.answer import AnswerStatus, UnverifiedAnswerError, export_answer, ranked_answers, study_answer
from sweeper.cli.verify_cmd import verification_table


@pytest.fixture
def verification(start_verification):
    """``verification(url, study, number, status, control)``: a stored verification of trial
    ``number`` (``status`` None: left running)."""

    def store_one(
        url: str, study: str, number: int, status: VerificationStatus | None, control: Control = Control.OFF
    ) -> None:
        with VerificationStore(url) as store:
            vid = start_verification(store, study_name=study, trial_number=number, params={}, control=control)
            if status is not None:
                store.finish(vid, status=status, reason="too slow", median_tps=80.0, max_ppl=2.2)

    return store_one


def test_the_answer_after_failed_verifications(synthetic, tmp_path, verification) -> None:
    study = synthetic.make_study(tmp_path)
    ranked = [r.number for r in ranked_answers(study_status(study.url, study.name).trials)]
    assert len(ranked) >= 2
    verification(study.url, study.name, ranked[0], VerificationStatus.FAILED)
    status = study_status(study.url, study.name)
    answer = study_answer(status.trials, status.verifications)
    assert answer.status is AnswerStatus.UNVERIFIED and answer.record.number == ranked[1]
    assert not answer.verified and "UNVERIFIED" in answer.describe()

    for number in ranked[1:]:
        verification(study.url, study.name, number, VerificationStatus.FAILED)
    status = study_status(study.url, study.name)
    answer = study_answer(status.trials, status.verifications)
    assert answer.status is AnswerStatus.FAILED and answer.record.number == ranked[0]
    assert json.dumps(answer.status) == '"failed"' and f"{answer.status}" == "failed"
    assert "FAILED verification (too slow)" in answer.describe()

    out = tmp_path / "answer.json"
    with pytest.raises(UnverifiedAnswerError, match=r"failed verification \(too slow\)"):
        export_answer(storage=study.url, study_name=study.name, output=out)
    result = export_answer(storage=study.url, study_name=study.name, output=out, allow_unverified=True)
    assert result.answer.status is AnswerStatus.FAILED
    assert "FAILED verification: too slow." in json.loads(out.read_text())["description"]


def test_the_verification_table_reads_status_and_control(synthetic, tmp_path, verification) -> None:
    study = synthetic.make_study(tmp_path)
    first, second, third = (r.number for r in ranked_answers(study_status(study.url, study.name).trials)[:3])
    verification(study.url, study.name, first, VerificationStatus.VERIFIED, Control.IS_BASE)
    verification(study.url, study.name, second, VerificationStatus.FAILED, Control.OFF)
    verification(study.url, study.name, third, None, Control.MEASURED)
    with VerificationStore(study.url) as store:
        table = verification_table(store.records(study.name), title="t")
    cells = {column.header: list(column.cells) for column in table.columns}
    assert cells["status"] == ["[green]VERIFIED[/green]", "[red]FAILED[/red]", "[yellow]RUNNING[/yellow]"]
    assert cells["vs base"] == ["is base", "off", "-"]
