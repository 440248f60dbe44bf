"""Grading at submission time on Gradescope and PrairieLearn: the course's grader as their autograders.

    course release --gradescope OUT             OUT/<notebook>/autograder.zip, one per notebook
    course release --prairielearn IMAGE OUT     OUT/image/ (a Dockerfile), OUT/serverFilesCourse/,
                                                OUT/questions/<notebook>/

Each platform grades every submission in a fresh container of an image built once from the bundle
(bundle.py): `setup.sh` installs Python 3.11 and the pinned packages in /opt/course/venv, bubblewrap,
and (Gradescope's) the nbgrader course into /opt/course/cache; then, per submission, run.py reads
the student's files (submission.py: the intake recognises the notebook, as `course grade` does),
grades it as one worker of a batch does (sandboxed kernel, judge outside it, partial credit), and
writes the platform's results.json (results.py) once the kernel and everything it started are gone.

The kernel runs under bubblewrap where the container lets it, else as an unprivileged user of its
own (autograder/kernel_user.py), who cannot read the course's source but its checks package, the
hidden material, the nbgrader course, the platform's files or the results. What each is and is not
tested against: docs/platforms.md.
"""
