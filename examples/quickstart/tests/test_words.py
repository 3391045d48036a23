from textkit import word_count, words


def test_words_splits_on_spaces_and_punctuation() -> None:
    assert words("Hello, world! 42 times") == ["Hello", "world", "42", "times"]


def test_words_of_empty_text() -> None:
    assert words("") == []
    assert words("  ...  ") == []


def test_word_count() -> None:
    assert word_count("one two  three") == 3
