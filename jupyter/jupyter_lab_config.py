# JupyterLab as the workbook starts it: `make jupyter` and the browser tests pass
# --config=<this file>. It points JupyterLab at the settings shipped in jupyter/lab/settings/
# (overrides.json: no "get notified about Jupyter news?" prompt and no update check, so a
# classroom screen shows the notebook; page_config.json: nbgrader's and Notebook 7's lab
# extensions off) and switches off nbgrader's server extensions: the workbook uses nbgrader
# only for `make student` (its ClearSolutions preprocessor), students need no grading menus.
import os

c = get_config()  # noqa: F821 (injected by traitlets when it loads this file)
HERE = os.path.dirname(os.path.abspath(__file__))
c.LabApp.app_settings_dir = os.path.join(HERE, "lab", "settings")
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.validate_assignment": False,
}
