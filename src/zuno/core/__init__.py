"""The words every other part uses: the three declarations, names, sentences and small helpers
with no Zuno imports.
"""
