"""Watched inboxes (issue #17): a local folder, an S3 prefix or a Google Drive folder whose
new files become jobs, one batch run per sweep, each file at most once. `models` is the
pure half; `local` and `watch` the local folders and their notifications; `sweeper` the
background task.
"""
