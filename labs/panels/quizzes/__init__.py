"""The "Проверь себя" quizzes: questions, answer keys, explanations and Redis checks, out of sight.

One module per quiz, named after the course module it closes: :mod:`labs.panels.quizzes.module1`
(notebook 04), :mod:`labs.panels.quizzes.module3` (notebook 08) and
:mod:`labs.panels.quizzes.monitoring` (notebook 10). Each exposes
``quiz(**facts) -> Quiz``; the notebook cell only builds it from its own measured facts, runs
:meth:`~labs.panels.quiz.Quiz.verify` against Redis and shows it, so no answer is on screen.
"""
