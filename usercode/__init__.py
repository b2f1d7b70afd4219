"""WHERE the user's own code is and how it is loaded: an entry `path/to/file.py:name` or `package.module:name`
(a reward, a tool, an environment) checked without running it (usercode.entry), imported in the attempt
(usercode.load), and any failure of it reported one way (usercode.failure)."""
