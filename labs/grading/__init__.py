"""The instructors' pipeline: a folder of submissions graded by nbgrader's own autograde (``make grade``).

Submissions are untrusted code: each notebook's kernel and each lab checker runs in a bubblewrap
sandbox of its own, and everything nbgrader scores or writes stays outside it (``docs/grading.md``).

- :mod:`labs.notebook_release` (below this room, shared with the exercises): nbgrader metadata on the
  student edition (answers, checks, locked cells), the ``check("NN.K")`` pattern;
- :mod:`labs.grading.course`: an nbgrader course directory with the released assignment in its gradebook;
- :mod:`labs.grading.submissions`: one folder per student (nbgrader's exchange layout, or a zip per student);
- :mod:`labs.grading.integrity`: deleted or edited locked cells, a notebook that is not JSON or not the student
  edition (matched to the release where that is sound);
- :mod:`labs.grading.limits`: time, memory, processes, disk and output a submission may take;
- :mod:`labs.grading.bwrap`, :mod:`labs.grading.cgroup`: the sandbox's command line (what it sees, as whom)
  and its cgroup (memory and tasks as a whole);
- :mod:`labs.grading.sandbox`: one job in a sandbox, from the grader's side (limits, report, log, clean-up);
- :mod:`labs.grading.runner`, :mod:`labs.grading.kernel`: inside the sandbox, its Redis and the notebook's
  kernel (a dead or deaf kernel costs its exercise only), each cell reported on a pipe;
- :mod:`labs.grading.execute`: nbgrader's execute step, done in the sandbox; only outputs come back;
- :mod:`labs.grading.autograde`: ``nbgrader autograde`` and ``generate_feedback`` per submission, and its grades;
- :mod:`labs.grading.labs_checks`: ``check-lab-1`` / ``check-lab-3`` of a submission (sandboxed), PASS/FAIL as
  points;
- :mod:`labs.grading.gradebook`, :mod:`labs.grading.summary`: CSV files and the class's HTML summary;
- :mod:`labs.grading.hostile`, :mod:`labs.grading.demo`: generated submissions, hostile ones included;
- :mod:`labs.grading.cli`: ``python -m labs.grading``.
"""
