"""The live service: policies of the machine kind racing on one task stream behind a FastAPI
app (REST, WebSocket, Prometheus metrics, dashboard) with persistent history.
Entry points: :func:`hybridsched.service.app.create_app`, ``hybridsched serve``."""
