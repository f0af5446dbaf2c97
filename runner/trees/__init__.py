"""A task's file trees, from its sources to a trial's workspace: archives checked member by
member, git-tree fixtures, the content-addressed input cache, staged copies and copy-free
views, and what a trial needs to know of a tree once it is staged (``facts``).
"""
