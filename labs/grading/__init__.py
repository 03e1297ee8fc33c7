"""The instructors' pipeline: a folder of submissions graded by nbgrader's own autograde (``make grade``).

- :mod:`labs.grading.release`: nbgrader metadata on the student edition (answers, checks, locked cells);
- :mod:`labs.grading.course`: an nbgrader course directory with the released assignment in its gradebook;
- :mod:`labs.grading.submissions`: one folder per student (nbgrader's exchange layout, or a zip per student);
- :mod:`labs.grading.integrity`: deleted or edited locked cells, a notebook that is not JSON;
- :mod:`labs.grading.sandbox`: a Redis of its own per submission, every process it started killed afterwards;
- :mod:`labs.grading.execute`: nbgrader's Execute that survives a dead kernel;
- :mod:`labs.grading.autograde`: ``nbgrader autograde`` and ``generate_feedback`` per submission, and its grades;
- :mod:`labs.grading.labs_checks`: ``check-lab-1`` / ``check-lab-3`` of a submission, PASS/FAIL as points;
- :mod:`labs.grading.gradebook`, :mod:`labs.grading.summary`: CSV files and the class's HTML summary;
- :mod:`labs.grading.cli`: ``python -m labs.grading``.
"""
