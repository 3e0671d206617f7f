"""The KVM guest's fixtures: this checkout's release images, as the Kubernetes tests get them."""

from tests.kube.cluster import release_layout  # noqa: F401 - CONTRAST_TEST_IMAGES or built_images
