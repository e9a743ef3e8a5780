from pathlib import Path


def test_the_answer_is_42():
    answer = Path("/app/answer.txt")
    assert answer.is_file(), "no /app/answer.txt"
    assert answer.read_text().strip() == "42"
