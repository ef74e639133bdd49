"""Burst and link events over MQTT: settings, rate policy, spool, publisher, and attach_mqtt."""

from burstscope.collector.mqtt.attach import MqttHandle, attach_mqtt
from burstscope.collector.mqtt.settings import MqttSettings, MqttSettingsError, build_settings

__all__ = [
    "MqttHandle",
    "MqttSettings",
    "MqttSettingsError",
    "attach_mqtt",
    "build_settings",
]
