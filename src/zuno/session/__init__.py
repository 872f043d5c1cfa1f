"""A session at run time: the runtime that holds the parts together and the background job lane."""
