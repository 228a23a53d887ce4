"""World models: the adapter protocol, reference models and imported predictions."""

from .base import History, Prediction, WorldModel, build_model, check_prediction
from .blobs import BlobReferenceModel
from .controls import ShuffledFuturesModel
from .generic import OracleNoiseModel, PersistenceModel
from .imported import ImportedModel
from .pendulum import LeastSquaresPendulumModel

__all__ = [
    "BlobReferenceModel", "History", "ImportedModel", "LeastSquaresPendulumModel", "OracleNoiseModel",
    "PersistenceModel", "Prediction", "ShuffledFuturesModel", "WorldModel", "build_model", "check_prediction",
]
