"""The Coordinator's certificate authorities and the mesh certificates they issue."""
