import importlib.util
import pathlib


def load():
    path = pathlib.Path("/app/fizzbuzz.py")
    assert path.is_file(), "/app/fizzbuzz.py does not exist"
    spec = importlib.util.spec_from_file_location("fizzbuzz", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fizzbuzz


def test_first_fifteen():
    assert load()(15) == [
        "1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
        "11", "Fizz", "13", "14", "FizzBuzz",
    ]


def test_empty():
    assert load()(0) == []


def test_length():
    assert len(load()(100)) == 100
